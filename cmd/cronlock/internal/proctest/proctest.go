//go:build unix

// Package proctest holds the helpers of cronlock's daemon tests that watch processes: a buffer
// safe for concurrent writes, a bounded poll, and process checks. Only tests import it.
package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use, for the output of commands and
// processes that tests read while it is written.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// WaitLimit bounds every wait of these tests, so that none can hang.
const WaitLimit = 20 * time.Second

// Eventually polls cond every 20ms until it holds, or fails the test after WaitLimit.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", WaitLimit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ProcessGone reports whether pid has exited (a zombie counts as exited: in a container the
// reaper of orphans may be slow, or absent).
func ProcessGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// ReadPIDs reads the pids written one per line to path.
func ReadPIDs(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}
