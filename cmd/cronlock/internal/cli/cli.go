// Package cli holds what the config-reading commands of cronlock share on their command line:
// the --config and --insecure-config flags, the loading of the config file they name, and the
// parsing of a command's flags, with --help and the errors that exit 2.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/exitcode"
)

// ParseFlags parses the flags of a command that takes no arguments. On --help it prints usage
// and the flags to stdout and returns flag.ErrHelp; on a bad flag it returns an exitcode.Usage.
func ParseFlags(fs *flag.FlagSet, usage string, args []string, stdout io.Writer) error {
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
		return exitcode.Usage{Err: fmt.Errorf("%s: %w (see 'cronlock %s --help')", fs.Name(), err, fs.Name())}
	case fs.NArg() > 0:
		return exitcode.Usage{Err: fmt.Errorf("%s takes no arguments, got %q (see 'cronlock %s --help')", fs.Name(), fs.Args(), fs.Name())}
	}
	return nil
}

// ConfigFlags are the flags of every command that reads the config file.
type ConfigFlags struct {
	Path     string
	Insecure bool // --insecure-config: accept a file that others can change
}

// FlagSet returns a flag set with the --config and --insecure-config flags every
// config-reading command has.
func FlagSet(name string) (*flag.FlagSet, *ConfigFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cf := &ConfigFlags{}
	fs.StringVar(&cf.Path, "config", "", "the config `file` (YAML; see docs/cli.md)")
	fs.BoolVar(&cf.Insecure, "insecure-config", false, "accept a config file that group or others can write, or that another user than root and this one owns (development only: whoever can change the file runs commands as this user)")
	return fs, cf
}

// Load reads and checks the config file for the command name, with opts; every problem is an
// exitcode.Usage (exit 2).
func (cf *ConfigFlags) Load(name string, opts ...config.LoadOption) (*config.Config, error) {
	if cf.Path == "" {
		return nil, exitcode.Usage{Err: fmt.Errorf("%s: give the config file with --config FILE", name)}
	}
	cfg, err := cf.Read(opts...)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		return nil, exitcode.Usage{Err: fmt.Errorf("config: %w", err)}
	case errors.Is(err, config.ErrUntrusted):
		return nil, exitcode.Usage{Err: fmt.Errorf("%w (for development only: --insecure-config)", err)}
	case err != nil:
		return nil, exitcode.Usage{Err: err}
	}
	return cfg, nil
}

// Read reads and parses the config file with opts, refusing one that others can change unless
// --insecure-config was given.
func (cf *ConfigFlags) Read(opts ...config.LoadOption) (*config.Config, error) {
	if cf.Insecure {
		opts = append(opts, config.Insecure())
	}
	return config.Load(cf.Path, opts...)
}

// DefaultOperator is the default of the control commands' --by: user@host, from the user this
// process runs as and the host name; "unknown" stands for either that cannot be found.
func DefaultOperator() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return name + "@" + host
}

// OperatorFlag adds --by to fs: who asks for a control command, recorded with what it does.
func OperatorFlag(set *flag.FlagSet) *string {
	return set.String("by", DefaultOperator(), "who asks, recorded with the pause, manual run or backfill and shown by status, history and the console")
}
