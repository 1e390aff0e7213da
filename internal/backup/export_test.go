package backup

// FakeDB is fakeDB, for the tests of package backup_test.
var FakeDB = fakeDB
