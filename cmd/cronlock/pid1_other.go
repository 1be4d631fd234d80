//go:build !linux

package main

// runAsPID1 does nothing outside Linux: containers there run a Linux kernel.
func runAsPID1() (code int, ran bool) { return 0, false }
