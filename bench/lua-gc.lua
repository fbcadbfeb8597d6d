-- bench/lua-gc.lua - a GC-heavy Lua workload for comparing heaps: the same
-- script under the stock lua5.4 and under fmem-lua (bench/lua-gc-bench.sh).
--
--   lua5.4 bench/lua-gc.lua [SCALE]
--
-- Three phases, each making and dropping many small objects while a
-- bounded set stays live, so the collector runs all the time:
--   tables    records with array and hash parts in a sliding window
--   strings   formatting, concatenation, table.concat and gsub
--   closures  closures over fresh upvalues, called and dropped
-- Prints one line per phase (CPU seconds from os.clock) and a checksum
-- that must not depend on the heap.
local scale = tonumber(arg and arg[1]) or 1

local function tables(n)
  local window, live, sum = 20000, {}, 0
  for i = 1, n do
    local rec = {id = i, name = "r" .. (i % 1000), tags = {i % 3, i % 5, i % 7}}
    rec[1], rec[2] = i * 2, i * 3
    live[i % window + 1] = rec
    local old = live[(i + window // 2) % window + 1]
    if old then sum = sum + old.id % 10 + #old.tags end
  end
  return sum
end

local function strings(n)
  local sum, parts = 0, {}
  for i = 1, n do
    local s = string.format("%d:%s:%x", i, ("ab"):rep(i % 8), i * 7)
    s = s .. "/" .. tostring(i % 97)
    parts[#parts + 1] = s
    if #parts == 200 then
      local joined = table.concat(parts, ",")
      sum = sum + #joined:gsub("ab", "c")
      parts = {}
    end
  end
  return sum
end

local function closures(n)
  local sum, keep = 0, {}
  for i = 1, n do
    local acc = {i}
    local function add(x) acc[1] = acc[1] + x; return acc[1] end
    local function twice(x) return add(add(x)) end
    sum = sum + twice(i % 13) % 1000
    keep[i % 5000 + 1] = twice
  end
  return sum
end

local total = 0
for _, phase in ipairs({{"tables", tables, 600000}, {"strings", strings, 300000},
                        {"closures", closures, 600000}}) do
  local name, fn, n = phase[1], phase[2], math.floor(phase[3] * scale)
  local t0 = os.clock()
  local sum = fn(n)
  total = total + sum
  print(string.format("%-8s n=%-8d %.3f s  sum=%d", name, n, os.clock() - t0, sum))
end
print("checksum " .. total)
