//go:build !linux

package main

// deviceBlockSize is 512 where the block size of a device is not looked
// up.
func deviceBlockSize(string) (int, error) { return 512, nil }
