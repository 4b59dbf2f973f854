//go:build !unix

package target

// syncDir: where directories cannot be synced (Windows), the file
// system's own journal keeps the rename.
func syncDir(string) error { return nil }
