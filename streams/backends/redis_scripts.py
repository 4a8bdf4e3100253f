"""Lua scripts of the Redis stream store; each runs atomically inside Redis.

Keys of a stream (``<p>`` is the key prefix, the braces keep them in one cluster slot):
``<p>{id}:c`` the Redis Stream of chunks, entry id ``<sequence>-0``, field ``c`` = chunk JSON;
``<p>{id}:m`` a hash: ``status``, ``seq`` (latest sequence), ``error``, ``output``, ``created``,
``updated``; ``<p>{id}:s`` a hash: step number → sequence of the step's first chunk.
Changes are announced on the pub/sub channel ``<p>{id}:n``: ``<first sequence>\\n<chunk>\\n…``
after a write, ``!<status> <sequence>`` after a status change, ``!deleted`` after a delete.
"""

ENSURE = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[2], 'status', 'active', 'seq', 0, 'created', ARGV[1], 'updated', ARGV[1])
if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
return 1
"""

# KEYS: chunks, meta, steps. ARGV: now, active_ttl_ms, max_length, n_chunks, channel,
# chunk_1 .. chunk_n, then (step, index) pairs.
APPEND = """
local status = redis.call('HGET', KEYS[2], 'status')
if not status then return redis.error_reply('HELIX_NOT_FOUND') end
if status == 'ended' or status == 'failed' then
  return redis.error_reply('HELIX_CLOSED ' .. status)
end
local n = tonumber(ARGV[4])
local base = tonumber(redis.call('HGET', KEYS[2], 'seq'))
local maxlen = tonumber(ARGV[3])
for i = 1, n do
  if maxlen > 0 then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', maxlen, (base + i) .. '-0', 'c', ARGV[5 + i])
  else
    redis.call('XADD', KEYS[1], (base + i) .. '-0', 'c', ARGV[5 + i])
  end
end
for j = 6 + n, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[j], base + tonumber(ARGV[j + 1]) + 1)
end
redis.call('HSET', KEYS[2], 'seq', base + n, 'updated', ARGV[1])
local ttl = tonumber(ARGV[2])
if ttl > 0 then
  for k = 1, 3 do redis.call('PEXPIRE', KEYS[k], ttl) end
end
if n > 0 then
  redis.call('PUBLISH', ARGV[5], (base + 1) .. '\\n' .. table.concat(ARGV, '\\n', 6, 5 + n))
end
return base + n
"""

# KEYS: chunks, meta, steps. ARGV: target status, allowed statuses as ",a,b,", now, ttl_ms
# (0: persist), channel, field to set ('' for none), its value, '1' to clear error and output.
TRANSITION = """
local status = redis.call('HGET', KEYS[2], 'status')
if not status then return redis.error_reply('HELIX_NOT_FOUND') end
if status == ARGV[1] then return 0 end
if not string.find(ARGV[2], ',' .. status .. ',', 1, true) then
  return redis.error_reply('HELIX_CLOSED ' .. status)
end
redis.call('HSET', KEYS[2], 'status', ARGV[1], 'updated', ARGV[3])
if ARGV[8] == '1' then redis.call('HDEL', KEYS[2], 'error', 'output') end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[2], ARGV[6], ARGV[7]) end
local ttl = tonumber(ARGV[4])
for k = 1, 3 do
  if ttl > 0 then redis.call('PEXPIRE', KEYS[k], ttl) else redis.call('PERSIST', KEYS[k]) end
end
redis.call('PUBLISH', ARGV[5], '!' .. ARGV[1] .. ' ' .. redis.call('HGET', KEYS[2], 'seq'))
return 1
"""

# KEYS: chunks, meta. ARGV: after sequence, limit.
# Returns nil for a missing stream, else {status, latest, error, first, chunk...}: the chunks
# kept after ``after``, the first with sequence ``first`` and the rest following on (``first`` is
# above after+1 when max_length trimmed the ones between).
READ = """
local meta = redis.call('HMGET', KEYS[2], 'status', 'seq', 'error')
if not meta[1] then return nil end
local after = tonumber(ARGV[1])
local latest = tonumber(meta[2])
local out = {meta[1], latest, meta[3] or '', 0}
if latest > after then
  local entries = redis.call('XRANGE', KEYS[1], (after + 1) .. '-0', '+', 'COUNT', tonumber(ARGV[2]))
  if #entries > 0 then
    out[4] = tonumber(string.match(entries[1][1], '^(%d+)'))
    for i = 1, #entries do out[4 + i] = entries[i][2][2] end
  end
end
return out
"""

# KEYS: chunks, meta, steps. ARGV: channel.
DELETE = """
local removed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if removed > 0 then redis.call('PUBLISH', ARGV[1], '!deleted') end
return removed
"""
