package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// callgrindNodes runs the nodes under valgrind's callgrind and reads the instructions they
// execute between a zero and a dump of their counters, both asked for with callgrind_control.
type callgrindNodes struct {
	dir  string // the servers' callgrind output files
	keep bool   // dir was given: leave the files for callgrind_annotate
	pids []int  // the servers' processes, set once they started
}

// newCallgrindNodes writes the servers' callgrind files to dir, which it creates and keeps, or
// to a temporary directory it removes when dir is empty.
func newCallgrindNodes(dir string) (*callgrindNodes, error) {
	for _, tool := range []string{"valgrind", "callgrind_control"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("-callgrind needs %s (apt-get install valgrind)", tool)
		}
	}
	if dir != "" {
		return &callgrindNodes{dir: dir, keep: true}, os.MkdirAll(dir, 0o755)
	}
	dir, err := os.MkdirTemp("", "pair-callgrind-*")
	if err != nil {
		return nil, err
	}
	return &callgrindNodes{dir: dir}, nil
}

// wrap is the command that runs each redis-server under callgrind.
func (c *callgrindNodes) wrap() []string {
	return []string{"valgrind", "--tool=callgrind", "--callgrind-out-file=" + filepath.Join(c.dir, "node.%p")}
}

func (c *callgrindNodes) close() {
	if !c.keep {
		_ = os.RemoveAll(c.dir)
	}
}

// control sends one callgrind_control action (--zero, --dump) to every node and waits for it.
func (c *callgrindNodes) control(action string) error {
	args := []string{action}
	for _, pid := range c.pids {
		args = append(args, strconv.Itoa(pid))
	}
	if out, err := exec.Command("callgrind_control", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("callgrind_control %s: %w: %s", action, err, bytes.TrimSpace(out))
	}
	return nil
}

// dump has every node write its counters and returns the instructions they executed since the
// zero, summed over the nodes. It is called once per run: a process's first dump is its .1 file.
func (c *callgrindNodes) dump() (int64, error) {
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
		n, err := callgrindSummary(data)
		if err != nil {
			return 0, fmt.Errorf("callgrind dump %s: %w", name, err)
		}
		sum += n
	}
	return sum, nil
}

// callgrindSummary returns the instruction count of a callgrind output file: its "summary:"
// line, the total of its only event (Ir).
func callgrindSummary(data []byte) (int64, error) {
	for line := range bytes.Lines(data) {
		if v, ok := bytes.CutPrefix(line, []byte("summary: ")); ok {
			return strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		}
	}
	return 0, fmt.Errorf("no summary line")
}
