package main

import (
	"runtime"
	"strings"
	"testing"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/buildinfo"
)

func TestDescribeBuild(t *testing.T) {
	got := describeBuild(buildinfo.Facts{Version: "v1.5.0", Commit: "feedbeef", Date: "2026-12-01T08:00:00Z", Go: "go1.26.2"})
	want := "cronlock v1.5.0\ncommit: feedbeef\nbuilt:  2026-12-01T08:00:00Z\ngo:     go1.26.2 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got != want {
		t.Errorf("got:\n%swant:\n%s", got, want)
	}
}

// The binary under test prints its Go version: the version command reads the real build info.
func TestVersionCommand(t *testing.T) {
	code, out, errOut := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "cronlock ") || !strings.Contains(out, "go:     "+runtime.Version()) {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}
