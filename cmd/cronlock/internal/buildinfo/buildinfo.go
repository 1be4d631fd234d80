// Package buildinfo says how the cronlock binary was built — version, commit, build date, Go
// version — for `cronlock version` and the daemon's cronlock_build_info metric.
package buildinfo

import (
	"cmp"
	"runtime"
	"runtime/debug"
)

// The build stamp: set by make (make dist, make image) with -ldflags '-X
// github.com/cronlock/cronlock/cmd/cronlock/internal/buildinfo.stampVersion=… (and
// stampCommit, stampDate)'. Empty otherwise.
var stampVersion, stampCommit, stampDate string

// Facts is how the binary was built.
type Facts struct {
	Version, Commit, Date, Go string
}

// Read returns this binary's facts: the stamp's, else the Go build information's (see resolve).
func Read() Facts {
	bi, _ := debug.ReadBuildInfo()
	return resolve(Facts{stampVersion, stampCommit, stampDate, ""}, bi)
}

// resolve returns each fact from the stamp when it has it, else from the Go build information
// bi (nil when the binary has none): the module version of 'go install …@VERSION', the VCS
// revision (with -dirty for a modified checkout) and commit time of a build in a checkout, and
// the Go version. What neither knows is "devel" (the version) or "unknown".
func resolve(stamp Facts, bi *debug.BuildInfo) Facts {
	f := stamp
	var vcsCommit, vcsTime string
	if bi != nil {
		if f.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			f.Version = bi.Main.Version
		}
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsCommit = s.Value
			case "vcs.time":
				vcsTime = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if vcsCommit != "" && modified {
			vcsCommit += "-dirty"
		}
		f.Go = bi.GoVersion
	}
	f.Version = cmp.Or(f.Version, "devel")
	f.Commit = cmp.Or(f.Commit, vcsCommit, "unknown")
	f.Date = cmp.Or(f.Date, vcsTime, "unknown")
	f.Go = cmp.Or(f.Go, runtime.Version())
	return f
}
