package redlock

import "testing"

// crc16 is Redis Cluster's hash (the check value of CRC16-XMODEM, as the Cluster
// specification gives it), and every slot has a tag that hashes to it.
func TestSlotTags(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	if got, want := slotOf("{user1000}.following"), slotOf("user1000"); got != want {
		t.Errorf("a hash tag decides the slot: %d, want %d", got, want)
	}
	if got, want := slotOf("foo{}{bar}"), int(crc16("foo{}{bar}")%HashSlots); got != want {
		t.Errorf("an empty hash tag is no tag: %d, want %d", got, want)
	}
	for slot, tag := range slotTags() {
		if s := slotOf(inSlot("cronlock:boot", slot)); s != slot {
			t.Fatalf("the marker of slot %d (tag %q) is in slot %d", slot, tag, s)
		}
	}
}
