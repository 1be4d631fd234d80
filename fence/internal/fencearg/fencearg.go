// Package fencearg checks the arguments every fenced write takes, for the stores of package
// fence.
package fencearg

import (
	"errors"
	"fmt"
	"reflect"
)

// Check returns an error naming the bad argument and the fix, or nil: resource must not be
// empty and token must be between 1 and max (the largest token the store holds).
func Check(resource string, token, max uint64) error {
	if resource == "" {
		return errors.New("fence: resource is empty: name the data the write guards, the same for every run of the job (e.g. the job's name)")
	}
	if token == 0 {
		return fmt.Errorf("fence: token for resource %q is 0: pass the run's fencing token (job.RunFrom(ctx).FencingToken, or CRONLOCK_FENCING_TOKEN in a shell job); 0 means no lock was taken", resource)
	}
	if token > max {
		return fmt.Errorf("fence: token %d for resource %q is past what the store holds (at most %d): pass the token of a cronlock lock unchanged", token, resource, max)
	}
	return nil
}

// Nil reports whether v is nil, or an interface holding a nil pointer (a typed nil, such as
// a nil *pgxpool.Tx passed as a pgx.Tx), which would panic on its first call.
func Nil(v any) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return r.IsNil()
	}
	return false
}
