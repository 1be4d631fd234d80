package main

import (
	"flag"
	"fmt"
	"io"
)

const versionUsage = `Usage: cronlock version

Prints the version of cronlock the binary was built from ("devel" for a local build).
`

func versionCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if err := parseFlags(fs, versionUsage, args, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "cronlock", version())
	return nil
}
