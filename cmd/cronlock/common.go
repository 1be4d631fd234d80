package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/redlock"
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
		return usageError{fmt.Errorf("%s: %w (see 'cronlock %s --help')", fs.Name(), err, fs.Name())}
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("%s takes no arguments, got %q (see 'cronlock %s --help')", fs.Name(), fs.Args(), fs.Name())}
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
		return nil, usageError{fmt.Errorf("%s: give the config file with --config FILE", name)}
	}
	cfg, err := cf.read()
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission):
		return nil, usageError{fmt.Errorf("config: %w", err)}
	case errors.Is(err, config.ErrUntrusted):
		return nil, usageError{fmt.Errorf("%w (for development only: --insecure-config)", err)}
	case err != nil:
		return nil, usageError{err}
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

// nodeClients makes one go-redis client per node of cfg, with the options the lock needs: a
// *redis.Client for a standalone server, a *redis.ClusterClient for a Redis Cluster. It does
// not connect: go-redis dials on first use. A password variable that is not set is a
// usageError naming it.
func nodeClients(cfg *config.Config) ([]redis.UniversalClient, error) {
	var clients []redis.UniversalClient
	for _, n := range cfg.Nodes {
		pw, err := n.Password(nil)
		if err != nil {
			closeClients(clients)
			return nil, usageError{err}
		}
		opts := &redis.UniversalOptions{
			Addrs:                 []string{n.Addr},
			Username:              n.Username,
			Password:              pw,
			DB:                    n.DB,
			ContextTimeoutEnabled: true,
			MaxRetries:            -1,
			DisableIdentity:       true, // see redlock.Node
		}
		if n.TLS {
			// A Cluster's members are on hosts of their own: without ServerName, each connection
			// verifies the host it dials.
			opts.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		if n.Cluster != nil {
			opts.Addrs = n.Cluster
			clients = append(clients, redis.NewClusterClient(opts.Cluster()))
			continue
		}
		if n.TLS {
			opts.TLSConfig.ServerName, _, _ = net.SplitHostPort(n.Addr)
		}
		clients = append(clients, redis.NewClient(opts.Simple()))
	}
	return clients, nil
}

// nodeNames returns the names of cfg's nodes, in messages.
func nodeNames(cfg *config.Config) []string {
	names := make([]string, len(cfg.Nodes))
	for i, n := range cfg.Nodes {
		names[i] = n.Name()
	}
	return names
}

// isCluster reports whether c is the client of a Redis Cluster.
func isCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

func closeClients(clients []redis.UniversalClient) {
	for _, c := range clients {
		_ = c.Close()
	}
}

// lockClient makes the redlock client over the node clients.
func lockClient(cfg *config.Config, clients []redis.UniversalClient, label string) (*redlock.Client, error) {
	nodes := make([]redlock.Node, len(clients))
	for i, c := range clients {
		nodes[i] = c
	}
	opts := []redlock.Option{redlock.WithLabel(label), redlock.WithBootKey(cfg.BootKey), redlock.WithMaxTTL(cfg.MaxTTL)}
	for i, n := range cfg.Nodes {
		opts = append(opts, redlock.WithNodeReplicas(i, n.WaitForReplicas))
	}
	if cfg.AllowEvenNodes {
		opts = append(opts, redlock.WithEvenNodes())
	}
	return redlock.New(nodes, opts...)
}

// defaultReplica is this process's default replica name: hostname-pid.
func defaultReplica() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// eachNode calls f for every client in parallel, each with ctx bounded by timeout, and waits.
func eachNode(ctx context.Context, clients []redis.UniversalClient, timeout time.Duration, f func(ctx context.Context, i int, c redis.UniversalClient)) {
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			f(ctx, i, c)
		})
	}
	wg.Wait()
}
