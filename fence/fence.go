package fence

import (
	"errors"
	"fmt"
)

// ErrStale matches (with errors.Is) the error of a write refused because its resource has
// seen a newer token. The error is a *StaleError.
var ErrStale = errors.New("fence: stale token")

// StaleError is the error of a write refused because its token is lower than the one the
// store holds for its resource: a newer holder has written since. Nothing of the write was
// applied. It matches ErrStale.
type StaleError struct {
	// Resource is the resource the write was for.
	Resource string
	// Token is the refused write's token.
	Token uint64
	// Stored is the token the store held for Resource when it refused the write.
	Stored uint64
}

// Error says which resource refused which token, and the newer token it holds.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale token for resource %q: %d is lower than %d, written by a newer holder", e.Resource, e.Token, e.Stored)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }
