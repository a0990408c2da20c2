package sqlite

// Refused exposes refused to the tests.
var Refused = refused

// MemoryCounted exposes memoryCounted to the tests.
var MemoryCounted = memoryCounted
