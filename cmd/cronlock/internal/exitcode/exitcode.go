// Package exitcode holds the errors that decide cronlock's exit code, so that the packages
// under cmd/cronlock can return them and main alone turns them into the code: a Usage error is
// a mistake in the command line or the config (exit 2), a Logged error was logged already
// (main prints nothing more); any other error exits 1.
package exitcode

// Usage is a mistake in the command line or the config: exit code 2.
type Usage struct{ Err error }

func (e Usage) Error() string { return e.Err.Error() }
func (e Usage) Unwrap() error { return e.Err }

// Logged is an error that was logged already: main only sets the exit code.
type Logged struct{ Err error }

func (e Logged) Error() string { return e.Err.Error() }
func (e Logged) Unwrap() error { return e.Err }
