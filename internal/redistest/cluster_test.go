package redistest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A Cluster serves every slot from the member Member names, and a member restarted comes back
// empty with the same slots while the others keep their data.
func TestClusterServesSlotsAndRestartsAMemberEmpty(t *testing.T) {
	c := StartClusters(t, 1, 3, Config{})[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cc := c.Client()

	// One key on each member, found by asking the cluster for its slot.
	keys := make([]string, 3)
	for n := 0; keys[0] == "" || keys[1] == "" || keys[2] == ""; n++ {
		k := fmt.Sprintf("k%d", n)
		m, err := c.MemberOf(ctx, k)
		must(t, err)
		if keys[m] == "" {
			keys[m] = k
		}
	}
	for i, k := range keys {
		must(t, cc.Set(ctx, k, "v", 0).Err())
		// The member itself answers for the key: it serves the slot.
		if got := get(t, c.Members()[i], k); got != "v" {
			t.Fatalf("member %d has %s = %q, want v", i, k, got)
		}
	}

	must(t, c.Restart(1))
	for i, k := range keys {
		got, err := c.Members()[i].Client().Get(ctx, k).Result()
		switch {
		case i == 1 && !errors.Is(err, redis.Nil):
			t.Errorf("restarted member still has %s: %q, %v", k, got, err)
		case i != 1 && got != "v":
			t.Errorf("member %d lost %s: %q, %v", i, k, got, err)
		}
	}
	// The restarted member serves its slots again.
	must(t, c.Members()[1].Client().Set(ctx, keys[1], "w", 0).Err())
}
