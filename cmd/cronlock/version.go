package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/buildinfo"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
)

const versionUsage = `Usage: cronlock version

Prints the version of cronlock the binary was built from, its commit, build date and Go
version. A release binary (make dist, make image) carries what its build stamped in; a binary
installed with 'go install …@VERSION' takes them from the Go build information; a local build
says "devel".
`

func versionCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := cli.ParseFlags(fs, versionUsage, args, stdout); err != nil {
		return err
	}
	fmt.Fprint(stdout, describeBuild(buildinfo.Read()))
	return nil
}

// describeBuild says how the binary was built, as `cronlock version` prints it.
func describeBuild(f buildinfo.Facts) string {
	return fmt.Sprintf("cronlock %s\ncommit: %s\nbuilt:  %s\ngo:     %s %s/%s\n",
		f.Version, f.Commit, f.Date, f.Go, runtime.GOOS, runtime.GOARCH)
}
