//go:build !mattn && !modernc && !ncruces

package sqlitedriver

// No driver selected: build with -tags mattn, modernc or ncruces.
const (
	DriverLabel = ""
	SQLDriver   = ""
)

func DSN(path string, busyMS int, txlock string) string { return "" }
