//go:build !unix

package weft

// processAlive cannot check other processes here: rely on the heartbeat.
func processAlive(int) bool { return true }
