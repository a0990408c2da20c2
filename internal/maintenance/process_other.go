//go:build !unix

package maintenance

// processAlive cannot check other processes here: rely on the heartbeat.
func processAlive(int) bool { return true }
