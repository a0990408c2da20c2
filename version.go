package weft

// Version is the version of this weft module.
const Version = "0.1.0"
