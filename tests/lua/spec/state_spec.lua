-- fmem.newstate: a Lua state whose whole heap is in the pool; values cross
-- by copy; closing it gives every byte back.
local fmem = require "fmem"

local here = debug.getinfo(1, "S").source:match("^@(.*)/spec/[^/]*$") or "tests/lua"
local function read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end
local churn = read_file(here .. "/gc_churn.lua")
-- the checksum gc_churn.lua gives, computed here on the ordinary heap
local churn_sum = load(churn)()

-- the whole message (busted's error_matches trims "chunk:line:" prefixes)
local function error_of(fn)
  local ok, err = pcall(fn)
  assert.is_false(ok, "expected an error")
  return err
end
local function raises_like(pattern, fn) assert.matches(pattern, error_of(fn)) end

local function used(p) return p:stats().allocated_bytes end

describe("newstate on a pool", function()
  local p = fmem.open("mem:?size=64M")

  it("runs code and returns plain values", function()
    local st = fmem.newstate(p)
    local a, b, c, d, e, f = st:dostring("return 1, 2.5, 'x\\0y', true, nil, {1, {k = 'v'}, n = 3}")
    assert.are.equal(1, a)
    assert.are.equal("integer", math.type(a))
    assert.are.equal(2.5, b)
    assert.are.equal("x\0y", c)
    assert.are.equal(true, d)
    assert.is_nil(e)
    assert.are.same({1, {k = "v"}, n = 3}, f)
    assert.are.equal(6, select("#", st:dostring("return 1, nil, nil, nil, nil, 6")))
    assert.are.equal(0, select("#", st:dostring("x = 1")))
    st:close()
  end)

  it("keeps its globals and calls functions by name", function()
    local st = fmem.newstate(p)
    st:dostring([[
      count = 0
      function add(a, b) count = count + 1; return a + b, count end
      function echo(...) return ... end
    ]])
    assert.are.same({5, 1}, {st:call("add", 2, 3)})
    assert.are.same({2.5, 2}, {st:call("add", 1, 1.5)})
    assert.are.same({{1, {2, "three"}}, "s", false},
                    {st:call("echo", {1, {2, "three"}}, "s", false)})
    assert.are.equal(3, select("#", st:call("echo", nil, nil, nil)))
    assert.are.equal(2, st:dostring("return count"))
    st:close()
  end)

  it("brings errors back as Lua errors and stays usable", function()
    local st = fmem.newstate(p)
    raises_like("^fmem: dostring: %(fmem state%):1: boom$",
                function() st:dostring("error('boom')") end)
    raises_like("^fmem: dostring: mine:1: x$",
                function() st:dostring("error('x')", "=mine") end)
    raises_like("^fmem: dostring: raw$", function() st:dostring("error('raw', 0)") end)
    raises_like("^fmem: dostring: %(error object is a table value%)$",
                function() st:dostring("error({})") end)
    raises_like("^fmem: dostring: 42$", function() st:dostring("error(42)") end)
    raises_like("^fmem: dostring: %(fmem state%):1: unexpected symbol",
                function() st:dostring("return +") end)
    raises_like("^fmem: call: global 'nope' is not a function %(a nil value%)$",
                function() st:call("nope") end)
    raises_like("^fmem: dostring: bad argument #1 %(string expected, got number%)$",
                function() st:dostring(42) end)
    raises_like("^fmem: call: bad argument #1 %(function name expected, got no value%)$",
                function() st:call() end)
    assert.are.equal(7, st:dostring("return 7"))
    st:close()
  end)

  it("refuses values that cannot be copied", function()
    local st = fmem.newstate(p)
    st:dostring("function id(x) return x end")
    raises_like("^fmem: dostring: result #1: a function cannot cross states",
                function() st:dostring("return print") end)
    raises_like("^fmem: dostring: result #2: a coroutine cannot cross states",
                function() st:dostring("return 1, coroutine.create(print)") end)
    raises_like("^fmem: dostring: result #1: a userdata cannot cross states",
                function() st:dostring("return io.stdout") end)
    raises_like("^fmem: dostring: result #1: tables nested too deeply %(or cyclic%)$",
                function() st:dostring("local t = {} t.t = t return t") end)
    raises_like("^fmem: call: argument #2: a function cannot cross states",
                function() st:call("id", print) end)
    local cyclic = {}
    cyclic[1] = cyclic
    raises_like("^fmem: call: argument #2: tables nested too deeply",
                function() st:call("id", cyclic) end)
    raises_like("^fmem: call: argument #2: a userdata cannot cross states",
                function() st:call("id", {f = {p}}) end)
    assert.are.equal("fine", st:call("id", "fine"))
    st:close()
  end)

  it("lives in the pool and gives everything back when closed", function()
    collectgarbage()
    local before = used(p)
    local st = fmem.newstate(p)
    assert.truthy(used(p) > before, "the state's heap is in the pool")
    assert.are.equal(churn_sum, st:dostring(churn, "=gc_churn"))
    local s = st:stats()
    assert.are.equal("pool", s.backing)
    assert.truthy(s.heap.remote_peak > 1024 * 1024, "peak " .. s.heap.remote_peak)
    assert.are.equal(0, s.hooks.spills)
    assert.truthy(s.hooks.mallocs > 100000)
    assert.truthy(st:memory() > 0)
    st:collect()
    st:close()
    assert.is_true(st:closed())
    assert.are.equal(before, used(p))
  end)

  it("closed states raise, close twice is quiet, <close> works", function()
    collectgarbage()
    local st = fmem.newstate(p)
    st:close()
    st:close()
    raises_like("^fmem: dostring: the state is closed$",
                function() st:dostring("return 1") end)
    assert.are.equal("fmem.state (closed)", tostring(st))
    local before = used(p)
    do
      local s2 <close> = fmem.newstate(p)
      s2:dostring("t = {} for i = 1, 1e4 do t[i] = {} end")
      assert.truthy(used(p) > before)
    end
    assert.are.equal(before, used(p))
  end)

  it("the collector closes a dropped state", function()
    collectgarbage()
    local before = used(p)
    for _ = 1, 5 do
      local st = fmem.newstate(p)
      st:dostring("x = string.rep('y', 100000)")
    end
    collectgarbage()
    collectgarbage()
    assert.are.equal(before, used(p))
  end)

  it("keeps its pool alive", function()
    local q = fmem.open("mem:?size=32M")
    local st = fmem.newstate(q)
    q = nil
    collectgarbage()
    assert.are.equal(3, st:dostring("return 1 + 2"))
    st:close()
  end)
end)
