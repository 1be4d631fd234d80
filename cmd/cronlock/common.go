package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
)

// parseFlags parses the flags of a command that takes no arguments. On --help it prints usage
// and the flags to stdout and returns flag.ErrHelp; on a bad flag it returns a usageError.
func parseFlags(fs *flag.FlagSet, usage string, args []string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, usage)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return err
	case err != nil:
		return usageError{Err: fmt.Errorf("%s: %w (see 'cronlock %s --help')", fs.Name(), err, fs.Name())}
	case fs.NArg() > 0:
		return usageError{Err: fmt.Errorf("%s takes no arguments, got %q (see 'cronlock %s --help')", fs.Name(), fs.Args(), fs.Name())}
	}
	return nil
}

// configFlags are the flags of every command that reads the config file.
type configFlags struct {
	path     string
	insecure bool // --insecure-config: accept a file that others can change
}

// flagSet returns a flag set with the --config and --insecure-config flags every
// config-reading command has.
func flagSet(name string) (*flag.FlagSet, *configFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cf := &configFlags{}
	fs.StringVar(&cf.path, "config", "", "the config `file` (YAML; see docs/cli.md)")
	fs.BoolVar(&cf.insecure, "insecure-config", false, "accept a config file that group or others can write, or that another user than root and this one owns (development only: whoever can change the file runs commands as this user)")
	return fs, cf
}

// load reads and checks the config file for the command name; every problem is a usageError
// (exit 2).
func (cf *configFlags) load(name string) (*config.Config, error) {
	if cf.path == "" {
		return nil, usageError{Err: fmt.Errorf("%s: give the config file with --config FILE", name)}
	}
	cfg, err := cf.read()
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		return nil, usageError{Err: fmt.Errorf("config: %w", err)}
	case errors.Is(err, config.ErrUntrusted):
		return nil, usageError{Err: fmt.Errorf("%w (for development only: --insecure-config)", err)}
	case err != nil:
		return nil, usageError{Err: err}
	}
	return cfg, nil
}

// read reads and parses the config file, refusing one that others can change unless
// --insecure-config was given.
func (cf *configFlags) read() (*config.Config, error) {
	if cf.insecure {
		return config.Load(cf.path, config.Insecure())
	}
	return config.Load(cf.path)
}
