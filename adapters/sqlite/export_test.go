package sqlite

// Migrations are the schema migrations, for tests that build a database of
// an older version.
var Migrations = migrations

// ApplicationID marks a leasehold database (PRAGMA application_id).
const ApplicationID = applicationID
