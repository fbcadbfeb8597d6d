-- runner.lua - a small test runner for the spec files, so make check needs
-- no busted. It offers the part of busted's API the specs use (describe,
-- it, pending, assert.are.equal/same, assert.is_true/is_false/is_nil,
-- truthy/falsy, has_error, error_matches, matches); the same files run
-- under busted too.
--
--   lua5.4 runner.lua spec/a_spec.lua spec/b_spec.lua ...
--
-- Prints one line per test and "N passed, N failed, N skipped" last; the
-- exit status is 1 if anything failed.

local passed, failed, skipped = 0, 0, 0
local path = {}

-- ---- assertions ------------------------------------------------------------

local function fail(msg, level)
  error(msg, (level or 1) + 2)
end

local function show(v)
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

local function deep_equal(a, b, seen)
  if a == b then return true end
  if type(a) ~= "table" or type(b) ~= "table" then return false end
  seen = seen or {}
  if seen[a] == b then return true end
  seen[a] = b
  for k, v in pairs(a) do
    if not deep_equal(v, b[k], seen) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

local function error_of(fn, ...)
  local ok, err = pcall(fn, ...)
  if ok then return nil end
  return err == nil and "nil" or err
end

local A = {}
function A.equal(expected, actual, msg)
  if expected ~= actual then
    fail((msg and msg .. ": " or "") .. "expected " .. show(expected) .. ", got " .. show(actual))
  end
end
function A.same(expected, actual, msg)
  if not deep_equal(expected, actual) then
    fail((msg and msg .. ": " or "") .. "tables differ")
  end
end
function A.is_true(v, msg) if v ~= true then fail(msg or ("expected true, got " .. show(v))) end end
function A.is_false(v, msg) if v ~= false then fail(msg or ("expected false, got " .. show(v))) end end
function A.is_nil(v, msg) if v ~= nil then fail(msg or ("expected nil, got " .. show(v))) end end
function A.truthy(v, msg) if not v then fail(msg or ("expected a true value, got " .. show(v))) end end
function A.falsy(v, msg) if v then fail(msg or ("expected a false value, got " .. show(v))) end end
function A.has_error(fn, want)
  local err = error_of(fn)
  if err == nil then fail("expected an error") end
  if want ~= nil and err ~= want then
    fail("expected error " .. show(want) .. ", got " .. show(err))
  end
end
function A.error_matches(fn, pattern)
  local err = error_of(fn)
  if err == nil then fail("expected an error matching " .. show(pattern)) end
  if type(err) ~= "string" or not err:find(pattern) then
    fail("error " .. show(err) .. " does not match " .. show(pattern))
  end
end
function A.matches(pattern, s)
  if type(s) ~= "string" or not s:find(pattern) then
    fail(show(s) .. " does not match " .. show(pattern))
  end
end
A.equals = A.equal

-- assert(...) keeps working; assert.are.x and assert.is.x are assert.x
local assert_table = setmetatable({}, {
  __call = function(_, v, msg, ...)
    if not v then error(msg or "assertion failed!", 2) end
    return v, msg, ...
  end,
  __index = function(t, k)
    if k == "are" or k == "is" then return t end
    return A[k]
  end,
})

-- ---- structure -------------------------------------------------------------

local function run_it(name, fn)
  local full = table.concat(path, " / ") .. " / " .. name
  local ok, err = xpcall(fn, function(e) return debug.traceback(tostring(e), 2) end)
  collectgarbage()
  if ok then
    passed = passed + 1
    print("ok: " .. full)
  else
    failed = failed + 1
    print("FAIL: " .. full .. "\n    " .. tostring(err):gsub("\n", "\n    "))
  end
end

local function describe(name, fn)
  path[#path + 1] = name
  local ok, err = pcall(fn)
  if not ok then
    failed = failed + 1
    print("FAIL: " .. table.concat(path, " / ") .. " (in describe): " .. tostring(err))
  end
  path[#path] = nil
end

local function pending(name)
  skipped = skipped + 1
  print("skip: " .. table.concat(path, " / ") .. " / " .. name)
end

-- ---- main ------------------------------------------------------------------

-- The module under test must be the build's, not one installed or left in
-- the current directory: run.sh puts the build tree first on package.cpath
-- and names the file it must come from (":preload:" under fmem-lua, where
-- the binding is linked in).
local want_module = os.getenv("FMEM_EXPECT_MODULE")
if want_module then
  local _, where = require "fmem"
  if where ~= want_module then
    print("FAIL: require \"fmem\" loaded " .. tostring(where) .. ", not " .. want_module)
    os.exit(1)
  end
  print("ok: require \"fmem\" is " .. where)
end

local env = setmetatable({
  describe = describe, it = run_it, pending = pending, assert = assert_table,
}, {__index = _G})

for _, file in ipairs(arg) do
  local chunk, err = loadfile(file, "t", env)
  if not chunk then
    failed = failed + 1
    print("FAIL: " .. file .. ": " .. err)
  else
    local ok, e = pcall(chunk)
    if not ok then
      failed = failed + 1
      print("FAIL: " .. file .. ": " .. tostring(e))
    end
  end
end

print(string.format("%d passed, %d failed, %d skipped", passed, failed, skipped))
os.exit(failed == 0 and 0 or 1, true)
