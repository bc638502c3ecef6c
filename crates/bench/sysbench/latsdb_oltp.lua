#!/usr/bin/env sysbench
-- latsdb's sysbench workload: sysbench's own OLTP transaction (from
-- oltp_common.lua, shipped with sysbench) plus the two statement kinds of
-- RonDB's sysbench variants that stock sysbench lacks:
--   --in_selects=N    SELECT c FROM sbtestT WHERE id IN (?, ...) per transaction
--   --in_keys=K       keys per IN-list
--   --filtered_ranges=N   SELECT c ... WHERE id BETWEEN ? AND ? AND k < ?:
--                     scans --range_size rows and (k being uniform over the
--                     table) returns about 1 in 100 of them
--   --read_only=on    no writes (oltp_ro); off gives oltp_rw
--   --noop_selects=N  SELECT 1 per transaction: touches no table, so its
--                     rate is the ceiling that sysbench itself, the protocol
--                     and the wake-ups leave for any statement on a server
-- Run by `latsdb bench sysbench`, which sets these from its own flags.

require("oltp_common")

sysbench.cmdline.options.in_selects = {"IN-list SELECT statements per transaction", 0}
sysbench.cmdline.options.in_keys = {"Keys per IN-list SELECT", 100}
sysbench.cmdline.options.filtered_ranges = {"Filtered range scans per transaction (about 1 in 100 rows returned)", 0}
sysbench.cmdline.options.noop_selects = {"SELECT 1 statements per transaction (touch no table)", 0}
sysbench.cmdline.options.read_only = {"Read-only transactions (no updates, deletes or inserts)", false}

local function table_num()
   return sysbench.rand.uniform(1, sysbench.opt.tables)
end

local function random_id()
   return sysbench.rand.default(1, sysbench.opt.table_size)
end

-- Prepares `sql` (with %u for the table number) with `n` INT parameters on
-- every table; returns stmts[t] and params[t][i].
local function prepare_ints(sql, n)
   local stmts, params = {}, {}
   for t = 1, sysbench.opt.tables do
      stmts[t] = con:prepare(string.format(sql, t))
      params[t] = {}
      for i = 1, n do
         params[t][i] = stmts[t]:bind_create(sysbench.sql.type.INT)
      end
      if n > 0 then
         stmts[t]:bind_param(unpack(params[t]))
      end
   end
   return stmts, params
end

function prepare_statements()
   if not sysbench.opt.skip_trx then
      prepare_begin()
      prepare_commit()
   end
   if sysbench.opt.point_selects > 0 then
      prepare_point_selects()
   end
   if sysbench.opt.range_selects then
      prepare_simple_ranges()
      prepare_sum_ranges()
      prepare_order_ranges()
      prepare_distinct_ranges()
   end
   if not sysbench.opt.read_only then
      prepare_index_updates()
      prepare_non_index_updates()
      prepare_delete_inserts()
   end
   if sysbench.opt.in_selects > 0 then
      local marks = string.rep("?,", sysbench.opt.in_keys - 1) .. "?"
      in_stmt, in_param = prepare_ints("SELECT c FROM sbtest%u WHERE id IN (" .. marks .. ")", sysbench.opt.in_keys)
   end
   if sysbench.opt.noop_selects > 0 then
      noop_stmt = con:prepare("SELECT 1")
   end
   if sysbench.opt.filtered_ranges > 0 then
      filtered_stmt, filtered_param = prepare_ints("SELECT c FROM sbtest%u WHERE id BETWEEN ? AND ? AND k < ?", 3)
   end
end

function event()
   if not sysbench.opt.skip_trx then
      begin()
   end
   if sysbench.opt.point_selects > 0 then
      execute_point_selects()
   end
   for _ = 1, sysbench.opt.noop_selects do
      noop_stmt:execute()
   end
   for _ = 1, sysbench.opt.in_selects do
      local t = table_num()
      for i = 1, sysbench.opt.in_keys do
         in_param[t][i]:set(random_id())
      end
      in_stmt[t]:execute()
   end
   if sysbench.opt.range_selects then
      execute_simple_ranges()
      execute_sum_ranges()
      execute_order_ranges()
      execute_distinct_ranges()
   end
   for _ = 1, sysbench.opt.filtered_ranges do
      local t = table_num()
      local id = random_id()
      filtered_param[t][1]:set(id)
      filtered_param[t][2]:set(id + sysbench.opt.range_size - 1)
      filtered_param[t][3]:set(math.max(1, math.floor(sysbench.opt.table_size / 100)))
      filtered_stmt[t]:execute()
   end
   if not sysbench.opt.read_only then
      execute_index_updates()
      execute_non_index_updates()
      execute_delete_inserts()
   end
   if not sysbench.opt.skip_trx then
      commit()
   end
end
