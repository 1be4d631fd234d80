package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
)

const versionUsage = `Usage: cronlock version

Prints the version of cronlock the binary was built from, its commit, build date and Go
version. A release binary (make dist, make image) carries what its build stamped in; a binary
installed with 'go install …@VERSION' takes them from the Go build information; a local build
says "devel".
`

// The build stamp: set by make (make dist, make image) with
// -ldflags '-X main.stampVersion=… -X main.stampCommit=… -X main.stampDate=…'. Empty
// otherwise.
var stampVersion, stampCommit, stampDate string

// buildFacts is what `cronlock version` prints.
type buildFacts struct {
	Version, Commit, Date, Go string
}

func versionCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cli.ParseFlags(fs, versionUsage, args, stdout); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprint(stdout, describeBuild(buildFacts{stampVersion, stampCommit, stampDate, ""}, bi))
	return nil
}

// describeBuild says how the binary was built: each fact from the stamp when it has it, else
// from the Go build information bi (nil when the binary has none): the module version of
// 'go install …@VERSION', the VCS revision and commit time of a build in a checkout, and the Go
// version. What neither knows is "devel" (the version) or "unknown".
func describeBuild(stamp buildFacts, bi *debug.BuildInfo) string {
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
	return fmt.Sprintf("cronlock %s\ncommit: %s\nbuilt:  %s\ngo:     %s %s/%s\n",
		f.Version, f.Commit, f.Date, f.Go, runtime.GOOS, runtime.GOARCH)
}
