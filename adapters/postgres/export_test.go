package postgres

// Migrations are the schema migrations, for tests that build a schema of an
// older version; "{s}" stands for the quoted schema name.
var Migrations = migrations
