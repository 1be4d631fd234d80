package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrUntrusted is matched (errors.Is) by Load's error when the file is one that others than
// root and this process's user can change: group or others may write it, or another user owns
// it. Whoever can change the config runs commands as the daemon, so the daemon refuses it.
var ErrUntrusted = errors.New("config: not safe to trust")

// LoadOption changes how Load reads a file.
type LoadOption func(*loadOptions)

type loadOptions struct {
	insecure  bool
	nodesOnly bool // jobs: may be left out
}

// Insecure makes Load accept a file that others can change (for development only).
func Insecure() LoadOption { return func(o *loadOptions) { o.insecure = true } }

// NodesOnly makes Load and Parse accept a config without jobs: or crontab:, for the commands
// that talk to the nodes alone (cronlock check).
func NodesOnly() LoadOption { return func(o *loadOptions) { o.nodesOnly = true } }

// checkTrusted returns an error matching ErrUntrusted when fi, the file at path, can be changed
// by another user than root and this process's: group or others may write it, or another user
// owns it (and may chmod it at any time).
func checkTrusted(path string, fi fs.FileInfo) error {
	if mode := fi.Mode().Perm(); mode&0o022 != 0 {
		return fmt.Errorf("%s: %w: group or others can write it (mode %04o), and whoever writes the config runs commands as this daemon: chmod go-w %s", path, ErrUntrusted, mode, path)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil
	}
	if uid := int(st.Uid); uid != 0 && uid != os.Geteuid() {
		return fmt.Errorf("%s: %w: it is owned by uid %d, neither root nor this daemon's user (uid %d), and its owner can change it at any time: chown %d %s",
			path, ErrUntrusted, uid, os.Geteuid(), os.Geteuid(), path)
	}
	return nil
}
