package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResolve(t *testing.T) {
	installed := &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v1.4.0"}}
	checkout := &debug.BuildInfo{GoVersion: "go1.26.2", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.time", Value: "2026-11-30T12:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	stamp := Facts{Version: "v1.5.0", Commit: "feedbeef", Date: "2026-12-01T08:00:00Z"}
	for _, tc := range []struct {
		name  string
		stamp Facts
		bi    *debug.BuildInfo
		want  Facts
	}{
		{"make: the stamp wins over the build info", stamp, checkout, Facts{"v1.5.0", "feedbeef", "2026-12-01T08:00:00Z", "go1.26.2"}},
		{"go install …@version: the module version", Facts{}, installed, Facts{"v1.4.0", "unknown", "unknown", "go1.26.1"}},
		{"go build in a checkout: the VCS facts", Facts{}, checkout, Facts{"devel", "0123abcd-dirty", "2026-11-30T12:00:00Z", "go1.26.2"}},
		{"no build info", Facts{}, nil, Facts{"devel", "unknown", "unknown", runtime.Version()}},
	} {
		assert.Equal(t, tc.want, resolve(tc.stamp, tc.bi), tc.name)
	}
}
