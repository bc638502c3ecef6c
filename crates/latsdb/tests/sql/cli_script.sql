-- Run by tests/sql_clients.rs through Debian's mariadb client (batch mode);
-- its output must equal cli_expected.txt.
CREATE DATABASE shop;
USE shop;
CREATE TABLE customers (
  id INT NOT NULL AUTO_INCREMENT,
  name VARCHAR(40) NOT NULL,
  city VARCHAR(40) DEFAULT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB COMMENT='people who buy';
CREATE TABLE orders (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  customer_id INT NOT NULL,
  amount DECIMAL(10,2) NOT NULL,
  placed DATE NOT NULL,
  note TEXT,
  KEY by_customer (customer_id)
);
INSERT INTO customers (name, city) VALUES ('Ada', 'London'), ('Grace', 'New York'), ('Linus', NULL);
SELECT LAST_INSERT_ID();
INSERT INTO orders (customer_id, amount, placed) VALUES (1, 10.50, '2026-01-02'), (1, 4.25, '2026-01-03'), (2, 99.99, '2026-02-01');
INSERT INTO orders SET customer_id = 3, amount = 1, placed = '2026-03-04', note = 'gift';
SELECT * FROM customers ORDER BY id;
SELECT id, customer_id, amount, placed, note FROM orders ORDER BY id;
SELECT c.name, COUNT(o.id) AS n, SUM(o.amount) AS total FROM customers c LEFT JOIN orders o ON o.customer_id = c.id GROUP BY c.name ORDER BY total DESC;
SELECT name FROM customers WHERE city IS NULL;
SELECT name FROM customers WHERE name LIKE 'G%' OR id IN (3) ORDER BY name;
SELECT DISTINCT customer_id FROM orders ORDER BY customer_id;
SELECT customer_id, MAX(amount) FROM orders GROUP BY customer_id HAVING MAX(amount) > 5 ORDER BY 1;
SELECT id FROM orders WHERE amount BETWEEN 4 AND 11 ORDER BY amount LIMIT 1, 1;
UPDATE orders SET amount = amount + 1 WHERE customer_id = 1;
SELECT ROW_COUNT();
DELETE FROM orders WHERE placed < '2026-01-03';
SELECT COUNT(*), SUM(amount), MIN(placed), MAX(placed) FROM orders;
INSERT INTO customers (id, name) VALUES (2, 'Grace Hopper') ON DUPLICATE KEY UPDATE name = VALUES(name);
REPLACE INTO customers (id, name, city) VALUES (3, 'Linus', 'Helsinki');
UPDATE customers SET id = 30 WHERE id = 3;
SELECT id, name, city FROM customers ORDER BY id;
START TRANSACTION;
INSERT INTO customers (name) VALUES ('Rolled Back');
ROLLBACK;
BEGIN;
UPDATE customers SET city = 'Paris' WHERE id = 1;
SELECT city FROM customers WHERE id = 1 FOR UPDATE;
COMMIT;
SELECT COUNT(*) FROM customers;
SELECT name FROM customers WHERE id IN (SELECT customer_id FROM orders) ORDER BY name;
SELECT name FROM customers WHERE id NOT IN (SELECT customer_id FROM orders) ORDER BY name;
SELECT COUNT(*) AS above_average FROM orders WHERE amount > (SELECT AVG(amount) FROM orders);
UPDATE orders SET amount = amount * 2 WHERE customer_id IN (SELECT id FROM customers WHERE city = 'Paris');
SELECT customer_id, amount FROM orders ORDER BY id;
SELECT COUNT(*) FROM customers WHERE EXISTS (SELECT 1 FROM orders WHERE amount > 1000);
SELECT YEAR(placed), MONTH(placed), DAY(placed), DAYOFWEEK(placed), EXTRACT(MONTH FROM placed) AS m, DATEDIFF(placed, '2026-01-01') AS since_new_year, DATE_FORMAT(placed, '%W %D %M %Y') AS long_date FROM orders ORDER BY id;
SELECT DATE('2026-05-06 07:08:09'), HOUR('2026-05-06 07:08:09'), DATE_FORMAT('2026-05-06 07:08:09', '%H:%i %p, week %v'), YEAR(NULL), DATE_FORMAT('not a date', '%Y');
SELECT DATE_ADD(placed, INTERVAL 1 MONTH) AS next_month, placed - INTERVAL 1 DAY AS day_before, DATE_SUB('2026-03-31 10:00:00', INTERVAL 90 MINUTE) AS earlier, ADDDATE(placed, 7) AS week_on FROM orders WHERE placed >= '2026-01-01' - INTERVAL 1 YEAR ORDER BY id;
SELECT name FROM customers UNION SELECT note FROM orders WHERE note IS NOT NULL ORDER BY name;
SELECT customer_id FROM orders UNION ALL SELECT id FROM customers WHERE id < 3 ORDER BY 1 DESC LIMIT 3;
SELECT GROUP_CONCAT(name ORDER BY name) AS names, GROUP_CONCAT(DISTINCT city ORDER BY city DESC SEPARATOR ' | ') AS cities, GROUP_CONCAT(id, ':', city ORDER BY id) AS pairs FROM customers;
SELECT customer_id, GROUP_CONCAT(amount ORDER BY amount DESC) AS amounts, GROUP_CONCAT(note) AS notes FROM orders GROUP BY customer_id ORDER BY customer_id;
SELECT COUNT(*) AS big_customers FROM (SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id) AS per_customer WHERE total > 5;
SELECT c.name, t.total FROM customers c JOIN (SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id) AS t ON t.customer_id = c.id ORDER BY t.total DESC;
WITH totals AS (SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id), big (who, amount) AS (SELECT customer_id, total FROM totals WHERE total > 5) SELECT c.name, big.amount FROM big JOIN customers c ON c.id = big.who ORDER BY c.name;
SELECT c.name FROM customers c WHERE EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id AND o.amount > 50) ORDER BY c.name;
SELECT c.name FROM customers c WHERE NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.id) ORDER BY c.name;
BEGIN;
INSERT INTO customers (id, name, city) VALUES (40, 'Sverdrup', 'Oslo');
SAVEPOINT a;
UPDATE customers SET city = 'Bergen' WHERE id = 40;
INSERT INTO customers (id, name) VALUES (41, 'Gone');
DELETE FROM customers WHERE id = 1;
SAVEPOINT b;
UPDATE customers SET city = 'Tromso' WHERE id = 40;
ROLLBACK TO SAVEPOINT b;
SELECT id, city FROM customers WHERE id IN (1, 40, 41) ORDER BY id;
ROLLBACK TO a;
SELECT id, name, city FROM customers WHERE id IN (1, 40, 41) ORDER BY id;
RELEASE SAVEPOINT a;
COMMIT;
SELECT id, city FROM customers WHERE id IN (1, 40, 41) ORDER BY id;
DELETE FROM customers WHERE id = 40;
CREATE TABLE notes (id INT PRIMARY KEY, customer_id INT REFERENCES customers (id), body TEXT, CONSTRAINT notes_customer FOREIGN KEY (customer_id) REFERENCES customers (id) ON DELETE CASCADE);
SHOW WARNINGS;
ALTER TABLE notes ADD CONSTRAINT notes_customer_2 FOREIGN KEY (customer_id) REFERENCES customers (id);
ALTER TABLE notes DROP FOREIGN KEY notes_customer_2;
INSERT INTO notes VALUES (1, 999, 'not checked');
SELECT id, customer_id FROM notes;
DROP TABLE notes;
SELECT LPAD('7', 3, '0'), RPAD('ab', 5, 'xy'), LPAD('abcdef', 3, '-'), REPEAT('ab', 3), REVERSE('latsdb'), CONCAT('[', SPACE(2), ']'), ASCII('A'), HEX('Hi'), HEX(255), UNHEX('4869');
SELECT MD5('latsdb'), SHA1('latsdb'), SHA2('latsdb', 256);
SELECT TRUNCATE(1.567, 2), TRUNCATE(-1.567, 1), POW(2, 10), SQRT(16), SQRT(-1), EXP(0), LN(1), LOG(2, 8), LOG10(1000), LOG2(8), SIGN(-3), ROUND(PI(), 4), RAND() < 1;
SELECT LAST_DAY('2024-02-10'), LAST_DAY('2023-12-31 10:00:00'), DAYNAME('2026-01-01'), MONTHNAME('2026-03-04'), FROM_UNIXTIME(86400);
SELECT TIMESTAMPDIFF(DAY, '2026-01-01', placed) AS days, TIMESTAMPDIFF(MONTH, '2025-12-15', placed) AS months, TIMESTAMPDIFF(HOUR, placed, '2026-03-04 06:30:00') AS hours FROM orders ORDER BY id;
SELECT UPPER(name), CONCAT(name, '@', IFNULL(city, '?')), LENGTH(name), COALESCE(NULL, 7), 7 DIV 2, 7 / 2 FROM customers WHERE id = 1;
CREATE TABLE grown (id INT PRIMARY KEY, name VARCHAR(20));
INSERT INTO grown VALUES (1, 'old'), (2, 'old too');
ALTER TABLE grown ADD COLUMN score INT NOT NULL DEFAULT 5, ADD COLUMN note VARCHAR(10), ADD tag CHAR(3) NOT NULL, ADD INDEX by_score (score);
SELECT * FROM grown ORDER BY id;
INSERT INTO grown VALUES (3, 'new', 9, 'hello', 'abc');
INSERT INTO grown (id, name, tag) VALUES (4, 'defaults', 'd');
UPDATE grown SET note = 'set' WHERE id = 1;
UPDATE grown SET score = score + 1 WHERE id = 2;
SELECT * FROM grown ORDER BY id;
SELECT id FROM grown WHERE score = 6;
SELECT SUM(score), COUNT(note) FROM grown;
ALTER TABLE grown ADD COLUMN amount DECIMAL(10,2) DEFAULT 1.50;
SELECT id, score, amount FROM grown ORDER BY id;
SHOW CREATE TABLE grown;
DROP TABLE grown;
CREATE TABLE members (id INT PRIMARY KEY, email VARCHAR(30) NOT NULL UNIQUE, team INT, nick VARCHAR(10), UNIQUE KEY team_nick (team, nick));
INSERT INTO members VALUES (1, 'a@x', 1, 'ann'), (2, 'b@x', 1, 'bob'), (3, 'c@x', 1, NULL), (4, 'd@x', 1, NULL);
UPDATE members SET email = 'a2@x' WHERE id = 1;
INSERT INTO members VALUES (5, 'a@x', 2, 'ann');
DELETE FROM members WHERE id = 2;
INSERT INTO members VALUES (6, 'b@x', 1, 'bob');
SELECT * FROM members ORDER BY id;
SHOW CREATE TABLE members;
SELECT INDEX_NAME, NON_UNIQUE, COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_NAME = 'members' ORDER BY INDEX_NAME, SEQ_IN_INDEX;
SELECT CONSTRAINT_NAME, CONSTRAINT_TYPE FROM information_schema.TABLE_CONSTRAINTS WHERE TABLE_NAME = 'members' ORDER BY CONSTRAINT_NAME;
CREATE TABLE pairs (id INT PRIMARY KEY, v INT);
INSERT INTO pairs VALUES (1, 10), (2, 20), (3, NULL), (4, NULL);
CREATE UNIQUE INDEX uv ON pairs (v);
ALTER TABLE pairs ADD COLUMN w INT UNIQUE;
UPDATE pairs SET w = id * 100;
UPDATE pairs SET v = 30 WHERE id = 3;
SELECT * FROM pairs ORDER BY id;
SHOW TABLES;
DROP TABLE members;
DROP TABLE pairs;
SHOW TABLES;
DESCRIBE customers;
CREATE INDEX by_city ON customers (city);
SELECT name FROM customers WHERE city = 'Paris';
ALTER TABLE customers DROP INDEX by_city;
TRUNCATE TABLE orders;
SELECT COUNT(*) FROM orders;
DROP TABLE orders;
DROP DATABASE shop;
SHOW DATABASES LIKE 'shop';
