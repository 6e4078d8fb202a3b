-- The fast path of check.lua, for a batch of common checks: every counting rule a plain counter
-- without a ban, an integer cost. The same decisions per check, with much less work per check:
-- one script call for every check a process made in one turn of its event loop, no ban reads, no reply formatting;
-- the caller derives exceeded/resetAt from the counts (resetAt is the window end it computed).
-- KEYS: the counter keys of every check, in order.
-- ARGV: per check: cost, n (its rule count), then per rule: ttl ms, stop (the limit of a `limit`
--       rule, past which counting stops as in check.lua; '-1' for `log` rules, which never stop).
-- Reply: per check, n entries: the rule's count; -1 for a rule not reached; -2 when a counter key
--        held a value that cannot count (only that check fails; the rest of the batch goes on).
local out = {}
local argc = #ARGV
local k = 0
local a = 1
while a <= argc do
  local cost = ARGV[a]
  local n = tonumber(ARGV[a + 1])
  a = a + 2
  local stopped = false
  for _ = 1, n do
    k = k + 1
    if stopped then
      out[#out + 1] = -1
    else
      local key = KEYS[k]
      -- INCRBY is several times cheaper than INCRBYFLOAT; a counter already holding a fraction
      -- (an earlier float cost, through check.lua) refuses it, and then INCRBYFLOAT counts it.
      local count = redis.pcall('INCRBY', key, cost)
      if type(count) == 'table' then count = redis.pcall('INCRBYFLOAT', key, cost) end
      if type(count) == 'table' then
        out[#out + 1] = -2
        stopped = true
      else
        redis.call('PEXPIRE', key, ARGV[a], 'NX')
        out[#out + 1] = count
        local stop = tonumber(ARGV[a + 1])
        if stop >= 0 and tonumber(count) > stop then stopped = true end
      end
    end
    a = a + 2
  end
end
return out
