package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestDescribeBuild(t *testing.T) {
	platform := " " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	installed := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}}
	checkout := &debug.BuildInfo{GoVersion: "go1.26.2", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	stamp := buildFacts{Version: "v1.5.0", Commit: "feedbeef", Date: "2026-12-01T08:00:00Z"}
	for _, tc := range []struct {
		name  string
		stamp buildFacts
		bi    *debug.BuildInfo
		want  string
	}{
		{"make: the stamp wins over the build info", stamp, checkout,
			"cronlock v1.5.0\ncommit: feedbeef\nbuilt:  2026-12-01T08:00:00Z\ngo:     go1.26.2" + platform},
		{"go install …@version: the module version", buildFacts{}, installed,
			"cronlock v1.4.0\ncommit: unknown\nbuilt:  unknown\ngo:     go1.26.1" + platform},
		{"go build in a checkout: the VCS facts", buildFacts{}, checkout,
			"cronlock devel\ncommit: 0123abcd-dirty\nbuilt:  2026-11-30T12:00:00Z\ngo:     go1.26.2" + platform},
		{"no build info", buildFacts{}, nil,
			"cronlock devel\ncommit: unknown\nbuilt:  unknown\ngo:     " + runtime.Version() + platform},
	} {
		if got := describeBuild(tc.stamp, tc.bi); got != tc.want {
			t.Errorf("%s:\ngot:\n%swant:\n%s", tc.name, got, tc.want)
		}
	}
}

// The binary under test prints its Go version: the version command reads the real build info.
func TestVersionCommand(t *testing.T) {
	code, out, errOut := runCLI(t, "version")
	if code != 0 || !strings.HasPrefix(out, "cronlock ") || !strings.Contains(out, "go:     "+runtime.Version()) {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
}
