package sqlite

// SQLite's settings for the process, made before any connection is opened
// (SQLite takes them only then). The driver's build leaves them at
// SQLite's defaults; profiles of the claim benchmark (BenchmarkClaimSteps)
// and of fanout5 showed what those cost on the one writer every write
// waits for:
//
//   - SQLite counts every allocation, for sqlite3_memory_used and the soft
//     heap limit, neither of which weft reads, under a process-wide mutex:
//     about fifty allocations a claimed step, 3.5% of the process's CPU.
//     SQLite's list of recommended options turns the counts off
//     (SQLITE_DEFAULT_MEMSTATUS=0).
//   - A connection serves its small allocations from its lookaside, 40
//     slots of 1,200 bytes by default; a claim of a hundred steps holds
//     more at once, and the rest went to malloc: 3% of the process's CPU
//     in malloc and free with 40 slots, 2.9 with 100, 2.2 with 200, 1.2
//     with 400. 400 slots are 480 KB a connection, all touched as it
//     opens: a store just opened took 1.1 to 1.4 MB more (VmRSS 17.7 ->
//     18.9 to 19.1 MB), and at most seven connections (the writer's two,
//     the checkpointer's, four readers) take 3.4 MB more.
//   - A statement that writes many rows inside a transaction keeps the
//     pages it changes in a statement journal, to undo itself alone if it
//     fails; past 64 KiB the journal goes to a temporary file (in
//     /var/tmp). A claim of a hundred steps, or a submission of a hundred
//     workflows, changes more than sixteen pages: a fanout5 run of 2,000
//     workflows opened 67 temporary files and wrote them 1,122 times. Up
//     to 120 KiB the journal stays in memory (fanout5 opens no temporary
//     file); a larger one (a submission of thousands of tasks, a
//     migration's update of a big table) goes to a file as before. The
//     bound is SQLite's: it takes a journal's memory in pieces of that
//     size and, spilling, writes each piece in one call, and its unix VFS
//     writes at most 128 KiB - 1 bytes a call (seekAndWriteFd masks the
//     length with 0x1ffff): at 256 KiB a spilling journal failed with
//     "database or disk is full" (TestLargeWritesSpillTheirJournals), and
//     at 4 MiB one past 4 MiB would have. Larger pieces cost memory: at
//     4 MiB, half a minute of the REST API under load (scripts/load)
//     ended at 81 MB resident against 60 at 64 KiB.
//
// The settings are the process's: another user of SQLite in it gets them
// too (sqlite3_memory_used reads 0 and the soft heap limit does nothing; a
// larger lookaside; statement journals in memory up to 120 KiB).

/*
extern int sqlite3_config(int, ...);
extern int sqlite3_status64(int, long long *, long long *, int);

// SQLITE_CONFIG_MEMSTATUS is 9, SQLITE_CONFIG_LOOKASIDE 13,
// SQLITE_CONFIG_STMTJRNL_SPILL 26. Each is refused (SQLITE_MISUSE) once
// SQLite was initialized, which only a connection opened earlier does.
static void weft_configure(void) {
	sqlite3_config(9, 0);
	sqlite3_config(13, 1200, 400);
	sqlite3_config(26, 120 << 10); // under 128 KiB: see above
}

// SQLITE_STATUS_MEMORY_USED is 0.
static long long weft_memory_counted(void) {
	long long cur = 0, high = 0;
	sqlite3_status64(0, &cur, &high, 0);
	return cur;
}
*/
import "C"

func init() {
	C.weft_configure() // refused only if SQLite is in use already: then it keeps its defaults
}

// memoryCounted is the memory SQLite counts as in use: zero while it does
// not count.
func memoryCounted() int64 {
	return int64(C.weft_memory_counted())
}
