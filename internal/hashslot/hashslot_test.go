package hashslot

import "testing"

// crc16 is Redis Cluster's hash (the check value of CRC16-XMODEM, as the Cluster
// specification gives it), and every slot has a tag that hashes to it.
func TestSlotTags(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	if got, want := Of("{user1000}.following"), Of("user1000"); got != want {
		t.Errorf("a hash tag decides the slot: %d, want %d", got, want)
	}
	if got, want := Of("foo{}{bar}"), int(crc16("foo{}{bar}")%Count); got != want {
		t.Errorf("an empty hash tag is no tag: %d, want %d", got, want)
	}
	for slot, tag := range tags() {
		if s := Of(Key("cronlock:boot", slot)); s != slot {
			t.Fatalf("the marker of slot %d (tag %q) is in slot %d", slot, tag, s)
		}
	}
}
