package sqlite

import _ "github.com/mattn/go-sqlite3" // registers "sqlite3"; see docs/dependencies.md

const driverName = "sqlite3"
