package main

import (
	"net"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// The demo on the user's nodes leaves none of its keys behind, and says so.
func TestDemoNodesRemovesItsKeys(t *testing.T) {
	var addrs []string
	var nodes []*miniredis.Miniredis
	for range 3 {
		m := miniredis.RunT(t)
		m.Set("user:key", "kept")
		nodes = append(nodes, m)
		addrs = append(addrs, m.Addr())
	}
	code, out, errOut := runCLI(t, "demo", "--nodes", strings.Join(addrs, ","), "--duration", "1s", "--every", "250ms", "--work", "50ms", "--ttl", "400ms")
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "removed the demo's") {
		t.Errorf("output does not say the keys were removed:\n%s", out)
	}
	for i, m := range nodes {
		if keys := m.Keys(); len(keys) != 1 || keys[0] != "user:key" {
			t.Errorf("node %d keeps %q, want only the user's key", i, keys)
		}
	}
}

func TestDemoNodesRefusesBadAddresses(t *testing.T) {
	for _, bad := range []string{"localhost", "host:", ":6379", "host:port", "host:70000"} {
		code, out, errOut := runCLI(t, "demo", "--nodes", "127.0.0.1:6379,"+bad)
		if want := `--nodes: "` + bad + `" is not host:port`; code != 2 || !strings.Contains(errOut+out, want) {
			t.Errorf("--nodes ...,%s: exit %d, output lacks %q:\n%s%s", bad, code, want, out, errOut)
		}
	}
}

// An unreachable node is reported by the address the user gave, not the demo's proxy's.
func TestDemoNodesNamesTheUnreachableNode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	_ = l.Close()
	m := miniredis.RunT(t)
	code, out, errOut := runCLI(t, "demo", "--nodes", m.Addr()+","+dead+","+m.Addr())
	if want := "lock node " + dead + ":"; code == 0 || !strings.Contains(errOut+out, want) {
		t.Errorf("exit %d, output lacks %q:\n%s%s", code, want, out, errOut)
	}
}
