//go:build unix && !linux

package main

// onlyZombies cannot tell zombies apart without /proc: every process counts as running.
func onlyZombies(int) bool { return false }
