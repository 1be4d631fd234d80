package scheduler

import "errors"

// IsSpecError reports whether err is, or wraps, the error of a malformed spec (specError),
// for the tests of package scheduler_test.
func IsSpecError(err error) bool {
	_, ok := errors.AsType[*specError](err)
	return ok
}
