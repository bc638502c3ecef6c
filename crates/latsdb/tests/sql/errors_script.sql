-- Run by tests/sql_clients.rs with `mariadb --force`: every statement that
-- fails must fail with the error code MySQL gives, and the session must stay
-- usable (the last SELECT answers).
CREATE DATABASE errs;
USE errs;
CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(3) NOT NULL, n INT);
INSERT INTO t VALUES (1, 'a', 1);
SELEC 1;
SELECT * FROM missing;
SELECT nope FROM t;
INSERT INTO t VALUES (1, 'b', 2);
INSERT INTO t VALUES (2, 'toolong', 2);
INSERT INTO t VALUES (3, NULL, 3);
INSERT INTO t VALUES (4, 'x', 'not a number');
INSERT INTO t (id) VALUES (5);
INSERT INTO t VALUES (6, 'x');
CREATE TABLE t (id INT PRIMARY KEY);
USE nosuchdb;
SELECT @@no_such_variable;
SELECT NO_SUCH_FUNCTION(1);
CREATE TABLE nokey (a INT);
SELECT id FROM t WHERE id = (SELECT id FROM t UNION SELECT 2);
SELECT id FROM t WHERE EXISTS (SELECT 1 FROM t AS u WHERE u.id = t.id + 1);
SELECT id FROM t WHERE id IN (SELECT id, v FROM t);
SELECT id FROM t UNION SELECT 1, 2;
SELECT id FROM t INTERSECT SELECT id FROM t;
SELECT * FROM (SELECT id FROM t);
SELECT * FROM (SELECT id, id FROM t) AS twice;
WITH RECURSIVE r AS (SELECT 1) SELECT * FROM r;
ALTER TABLE t ADD COLUMN N INT;
ALTER TABLE t ADD COLUMN d DATE NOT NULL;
ALTER TABLE t ADD COLUMN z INT AFTER id;
BEGIN;
ROLLBACK TO SAVEPOINT nope;
COMMIT;
SELECT id, v, n FROM t;
DROP DATABASE errs;
