package postgres

// Refused exposes refused to the tests.
var Refused = refused
