package backup

// For the tests of package backup_test.
var CheckSnapshot = checkSnapshot

const TestKey = testKey
