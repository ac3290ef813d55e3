-- bench/scripts/sqlite.sql: a query workload for sqlite3 (bench/run), on an in-memory database.
-- Inserts rows with text of mixed sizes, indexes them, aggregates, updates and deletes.
PRAGMA cache_size = -16000;
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, payload BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 30000)
INSERT INTO t(grp, name, payload)
	SELECT x % 97, printf('name-%d-%s', x, hex(randomblob(8 + x % 56))), randomblob(16 + x % 900)
	FROM c;
CREATE INDEX t_grp ON t(grp, name);
SELECT grp, count(*), sum(length(payload)), max(name) FROM t GROUP BY grp ORDER BY 3 DESC LIMIT 5;
SELECT count(DISTINCT substr(name, 1, 9)) FROM t;
UPDATE t SET name = name || '-' || hex(randomblob(4)), payload = zeroblob(length(payload) / 2)
	WHERE id % 3 = 0;
SELECT a.grp, count(*) FROM t a JOIN t b ON a.id = b.id + 1 AND a.grp = b.grp % 97
	GROUP BY a.grp ORDER BY 2 DESC LIMIT 3;
DELETE FROM t WHERE grp < 40;
SELECT count(*), total(length(name)) FROM t;
