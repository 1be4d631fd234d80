package supervise

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain makes the test binary a supervisor when Command runs it as one (Command starts
// os.Executable with Mode).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == Mode {
		s, err := Parse(os.Args[2:])
		if err == nil {
			err = s.Run()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "cronlock: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// A binary built with -race sleeps a second at exit unless told not to: the supervisors'
	// would last that much longer than their commands.
	if err := os.Setenv("GORACE", "atexit_sleep_ms=0"); err != nil {
		panic(err)
	}
	goleak.VerifyTestMain(m)
}
