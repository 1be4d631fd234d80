package redlock

import "errors"

// ErrNotReplicated is matched by a node's error when the node did what was asked but fewer of
// its replicas than WaitForReplicas asks for acknowledged it in time: the node's yes does not
// count, since a failover to a replica that missed it would forget it.
var ErrNotReplicated = errors.New("redlock: not acknowledged by the node's replicas")
