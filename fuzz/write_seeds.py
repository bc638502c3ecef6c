#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz targets into corpus/.

The native_frames seeds come from the cluster tests instead (valid client
requests encoded by the product's own encoder):
  cargo test -p latsdb-cluster --test mutated_input -- --ignored
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    path = os.path.join(HERE, "corpus", target)
    os.makedirs(path, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(os.path.join(path, name), mode) as f:
        f.write(data)


def packet(seq, payload):
    return struct.pack("<I", len(payload))[:3] + bytes([seq]) + payload


def mysql_packets():
    # HandshakeResponse41: PROTOCOL_41, SECURE_CONNECTION, PLUGIN_AUTH,
    # CONNECT_WITH_DB, PLUGIN_AUTH_LENENC.
    caps = 0x00000200 | 0x00008000 | 0x00080000 | 0x00000008 | 0x00200000
    handshake = (struct.pack("<IIB", caps, 1 << 24, 45) + b"\0" * 23 + b"root\0"
                 + bytes([20]) + b"x" * 20 + b"test\0" + b"mysql_native_password\0")
    query = b"\x03" + b"SELECT 1, 'a\\'b', NOW(6), CONCAT(x, ?) FROM t WHERE id IN (1,2) ORDER BY 1 LIMIT 3"
    prepare = b"\x16" + b"INSERT INTO t (a, b) VALUES (?, ?)"
    # COM_STMT_EXECUTE: statement id (its low byte is the parameter count
    # the target assumes), flags, iterations, NULL bitmap, bound, types, values.
    execute = (b"\x17" + struct.pack("<IBI", 2, 0, 1) + b"\x00" + b"\x01" + struct.pack("<HH", 8, 253)
               + struct.pack("<q", -5) + bytes([3]) + b"abc")
    temporal = (b"\x17" + struct.pack("<IBI", 3, 0, 1) + b"\x00" + b"\x01" + struct.pack("<HHH", 12, 11, 246)
                + bytes([11]) + struct.pack("<HBBBBBI", 2024, 2, 29, 23, 59, 58, 123456)
                + bytes([8]) + struct.pack("<BIBBB", 1, 2, 3, 4, 5) + bytes([5]) + b"-1.25")
    session = b"".join(packet(s, p) for s, p in [(1, handshake), (0, query), (0, prepare), (0, execute), (0, temporal)])
    write("mysql_packets", "session", session)
    write("mysql_packets", "handshake", packet(1, handshake))


EXPRESSIONS = [
    "1 + 2 * 3, -i, u DIV 3, f / 0, d * 1e10, n % 7",
    "CONCAT(c, v, tx), LENGTH(v), CHAR_LENGTH(v), UPPER(v), LOWER(c), SUBSTRING(v, 2, 3), LEFT(v, -1), "
    "REPEAT('ab', 3), LPAD(v, 20, 'xy'), REPLACE(v, 'l', 'L'), TRIM(BOTH 'x' FROM 'xxaxx'), LOCATE('o', v)",
    "DATE_ADD(dt, INTERVAL 1 MONTH), DATEDIFF(dtm, dt), DATE_FORMAT(dtm, '%Y-%m-%d %H:%i:%s.%f %W %j'), "
    "STR_TO_DATE('31/12/2024', '%d/%m/%Y'), UNIX_TIMESTAMP(ts), FROM_UNIXTIME(1e9), "
    "TIMESTAMPDIFF(SECOND, dt, dtm), EXTRACT(YEAR_MONTH FROM dtm), LAST_DAY(dt), WEEK(dt, 3)",
    "CAST(v AS SIGNED), CAST(n AS DECIMAL(30,10)), CAST(tx AS DATETIME(6)), CAST(bl AS CHAR), "
    "CONVERT(i, UNSIGNED), CAST('12:34:56' AS TIME), CAST(f AS DOUBLE)",
    "v LIKE 'h%o_', v REGEXP '^h.*d$', REGEXP_REPLACE(v, '[aeiou]', '*'), v RLIKE 'x|y', INSTR(v, 'w'), "
    "FIELD('b', 'a', 'b'), ELT(2, 'a', 'b'), FIND_IN_SET('y', 'x,y')",
    "CASE WHEN i > 0 THEN 'p' WHEN i < 0 THEN 'n' ELSE 'z' END, IF(b, 1, 0), IFNULL(nl, 5), "
    "COALESCE(nl, NULL, d), NULLIF(i, -42), GREATEST(i, u, f), LEAST(c, v)",
    "HEX(bn), UNHEX('4142'), TO_BASE64(bl), FROM_BASE64('QUJD'), MD5(v), SHA1(v), SHA2(v, 256), CRC32(v), "
    "BIN(bt), OCT(255), CONV('ff', 16, 2), bt | 1, bt << 3, ~i, i ^ 5",
    "ROUND(n, 2), TRUNCATE(d, -2), CEIL(f), FLOOR(-f), ABS(i), SIGN(n), SQRT(u), POW(2, 64), LOG(0), "
    "EXP(1000), MOD(n, 0), RAND(1), PI()",
    "e, s, e + 0, s + 0, FIND_IN_SET('z', s), tm, TIME_TO_SEC(tm), SEC_TO_TIME(3601), "
    "ADDTIME(tm, '01:00:00'), y, y + 1, TIME_FORMAT(tm, '%H:%i')",
    "i IN (1, -42, NULL), v BETWEEN 'a' AND 'z', nl IS NULL, c = 'ab', c <=> NULL, (i, u) = (1, 2), "
    "NOT b, b XOR 1, JSON_VALID('{}'), ?",
    "GROUP_CONCAT(v), COUNT(*), SUM(n), DATABASE(), NOW(), CURRENT_DATE, @x, @@sql_mode, CONNECTION_ID(), "
    "LAST_INSERT_ID()",
]

STATEMENTS = [
    "SELECT v, COUNT(*), SUM(n) FROM t WHERE i BETWEEN 1 AND 10 AND c LIKE 'a%' GROUP BY v HAVING COUNT(*) > 1 "
    "ORDER BY 2 DESC LIMIT 3, 4",
    "SELECT a.v, b.dt FROM t a LEFT JOIN u b ON a.i = b.i WHERE b.tm IS NULL OR a.e = 'b' FOR UPDATE",
    "SELECT * FROM t WHERE v = ? AND i IN (SELECT i FROM u WHERE y > 2000) UNION ALL SELECT * FROM u",
    "WITH r AS (SELECT i, ROW_NUMBER() OVER (PARTITION BY e ORDER BY dtm) AS rn FROM t) SELECT * FROM r WHERE rn < 3",
    "SELECT DISTINCT CAST(tx AS DATETIME), (SELECT MAX(f) FROM u) FROM t WHERE i > ? ORDER BY v LIMIT 10",
    "INSERT INTO t (i, v, n, dt) VALUES (1, 'x', 1.5, '2024-01-01'), (?, ?, ?, ?) "
    "ON DUPLICATE KEY UPDATE n = VALUES(n) + 1",
    "INSERT INTO t SELECT * FROM u WHERE i < 5",
    "UPDATE t SET f = f * 2, v = CONCAT(v, 'x') WHERE i = 7",
    "UPDATE t JOIN u ON t.i = u.i SET t.y = u.y WHERE u.b",
    "DELETE FROM t WHERE dtm < NOW() - INTERVAL 1 DAY ORDER BY i LIMIT 5",
]

REST_BODIES = {
    "batch": '{"operations":[{"method":"POST","relative-url":"db/t/pk-read","body":{"filters":'
             '[{"column":"i","value":7},{"column":"v","value":"a"}],"readColumns":[{"column":"f"},'
             '{"column":"bl","dataReturnType":"default"}],"operationId":"op1"}}]}',
    "batch_write": '{"operations":[{"method":"POST","relative-url":"/0.1.0/db/t/pk-write","body":{"data":'
                   '{"i":1,"v":"x","n":"12.5","dt":"2024-01-01","bn":"AAEC","tm":"-838:59:59"}}},'
                   '{"method":"POST","relative-url":"db/t/pk-delete","body":{"filters":'
                   '[{"column":"i","value":-1},{"column":"v","value":"\\u00e9"}]}}]}',
    "op_read": '{"filters":[{"column":"i","value":1},{"column":"v","value":"z"}],"readColumns":[{"column":"dtm"}]}',
    "op_write": '{"filters":[{"column":"i","value":1},{"column":"v","value":"z"}],"writeColumns":'
                '[{"column":"u","value":65535},{"column":"f","value":1.5e38},'
                '{"column":"ts","value":"2038-01-19 03:14:07.999"},{"column":"bt","value":"Hw=="},'
                '{"column":"s","value":"x,y"},{"column":"b","value":true},{"column":"y","value":1901}]}',
    "op_data": '{"data":{"i":2147483647,"v":"","e":"b","dt":"1111:11:11","bl":null}}',
    "feature_view": '{"name":"fv","version":1,"featureStore":"fs","groups":[{"table":"db.t","prefix":"p_",'
                    '"features":["f","n"],"join":["i"]}]}',
    "feature_request": '{"featureStoreName":"fs","featureViewName":"fv","featureViewVersion":1,'
                       '"entries":{"i":1},"passedFeatures":{"f":2.5},"metadataOptions":'
                       '{"featureName":true,"featureType":true},"options":{"validatePassedFeatures":true}}',
    "url": "db/t/pk-read",
}

AVRO = {
    "record": b'{"type":"record","name":"r","fields":[{"name":"f","type":["null",{"type":"array","items":'
              b'{"type":"record","name":"x","fields":[{"name":"a","type":"long"},{"name":"b","type":'
              b'["null","string"]},{"name":"m","type":{"type":"map","values":"double"}}]}}]}]}'
              + b"\0" + bytes([2, 2, 4, 2, 6]) + b"abc" + bytes([2, 2, 107]) + b"\0" * 8 + bytes([0, 0]),
    "decimal": b'{"type":"record","name":"r","fields":[{"name":"f","type":{"type":"fixed","name":"d",'
               b'"size":4,"logicalType":"decimal","precision":8,"scale":2}}]}' + b"\0" + bytes([0, 0, 4, 210]),
    "enum": b'{"type":"record","name":"r","fields":[{"name":"f","type":{"type":"enum","name":"e",'
            b'"symbols":["A","B"]}},{"name":"g","type":"bytes"}]}' + b"\0" + bytes([2]),
}


def main():
    mysql_packets()
    for i, expression in enumerate(EXPRESSIONS):
        write("sql_expressions", f"e{i:02}", expression)
    for i, statement in enumerate(STATEMENTS):
        write("sql_statements", f"s{i:02}", statement)
    for name, body in REST_BODIES.items():
        write("rest_bodies", name, body)
    for name, data in AVRO.items():
        write("avro", name, data)
    # The configuration documented in docs/configuration.md.
    with open(os.path.join(HERE, "..", "docs", "configuration.md")) as f:
        doc = f.read()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    write("config", "documented.toml", example)
    write("config", "minimal.toml", "[cluster]\nreplicas = 1\n[[datanode]]\nnode_id = 2\n")


if __name__ == "__main__":
    main()
