//go:build !linux

package e2e

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }

func lockThreadForChild() {}
