package sqlite

// Refused exposes refused to the tests.
var Refused = refused
