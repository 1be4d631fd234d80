package nodecost

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// Callgrind runs the nodes under valgrind's callgrind and reads the instructions they execute
// between a zero and a dump of their counters, both asked for with callgrind_control.
type Callgrind struct {
	dir  string // the servers' callgrind output files
	keep bool   // dir was given: leave the files for callgrind_annotate
	pids []int  // the servers' processes, added once they started
}

// NewCallgrind writes the servers' callgrind files to dir, which it creates and keeps, or to a
// temporary directory that Close removes when dir is empty.
func NewCallgrind(dir string) (*Callgrind, error) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("-callgrind needs %s (apt-get install valgrind)", tool)
		}
	}
	if dir != "" {
		return &Callgrind{dir: dir, keep: true}, os.MkdirAll(dir, 0o755)
	}
	dir, err := os.MkdirTemp("", "nodecost-callgrind-*")
	if err != nil {
		return nil, err
	}
	return &Callgrind{dir: dir}, nil
}

// Wrap is the command that runs each redis-server under callgrind (redistest.Config.Wrap).
func (c *Callgrind) Wrap() []string {
	return []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(c.dir, "node.%p")}
}

// Watch adds the processes of servers started with Wrap.
func (c *Callgrind) Watch(pids ...int) { c.pids = append(c.pids, pids...) }

// Close removes the callgrind files unless their directory was given to NewCallgrind.
func (c *Callgrind) Close() {
	if !c.keep {
		_ = os.RemoveAll(c.dir)
	}
}

// Zero zeroes every node's counters: the instructions counted start here.
func (c *Callgrind) Zero() error { return c.control("--zero") }

// control sends one callgrind_control action (--zero, --dump) to every node and waits for it.
func (c *Callgrind) control(action string) error {
	args := []string{action}
	for _, pid := range c.pids {
		args = append(args, strconv.Itoa(pid))
	}
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", action, err, bytes.TrimSpace(out))
	}
	return nil
}

// Dump has every node write its counters and returns the instructions they executed since the
// zero, summed over the nodes. Call it once per set of servers: a process's first dump is its
// .1 file.
func (c *Callgrind) Dump() (int64, error) {
	if err := c.control("--dump"); err != nil {
		return 0, err
	}
	var sum int64
	for _, pid := range c.pids {
		name := filepath.Join(c.dir, fmt.Sprintf("node.%d.1", pid))
		data, err := os.ReadFile(name)
		if err != nil {
			return 0, fmt.Errorf("callgrind dump: %w", err)
		}
		n, err := summary(data)
		if err != nil {
			return 0, fmt.Errorf("callgrind dump %s: %w", name, err)
		}
		sum += n
	}
	return sum, nil
}

// summary returns the instruction count of a callgrind output file: its "summary:" line, the
// total of its only event (Ir).
func summary(data []byte) (int64, error) {
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("summary: ")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no summary line")
}
