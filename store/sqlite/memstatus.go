package sqlite

// SQLite counts every allocation it makes for sqlite3_memory_used and the
// soft heap limit, neither of which weft reads, under a process-wide
// mutex: two lock round trips an allocation, about fifty allocations a
// claimed step. A profile of the claim benchmark put that bookkeeping at
// 3.5% of the process's CPU, on the one writer every write waits for.
// SQLite's own list of recommended options turns it off
// (SQLITE_DEFAULT_MEMSTATUS=0); the driver's build does not, so the store
// does, before any connection is opened. The setting is the process's:
// another user of SQLite in it loses the counts, nothing else.

/*
extern int sqlite3_config(int, ...);
extern int sqlite3_status64(int, long long *, long long *, int);

// SQLITE_CONFIG_MEMSTATUS is 9; it is refused (SQLITE_MISUSE) once SQLite
// was initialized, which only a connection opened earlier does.
static int weft_memstatus_off(void) { return sqlite3_config(9, 0); }

// SQLITE_STATUS_MEMORY_USED is 0.
static long long weft_memory_counted(void) {
	long long cur = 0, high = 0;
	sqlite3_status64(0, &cur, &high, 0);
	return cur;
}
*/
import "C"

func init() {
	C.weft_memstatus_off() // refused only if SQLite is in use already: then it counts, as before
}

// memoryCounted is the memory SQLite counts as in use: zero while it does
// not count.
func memoryCounted() int64 {
	return int64(C.weft_memory_counted())
}
