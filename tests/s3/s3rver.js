#!/usr/bin/env node
/*
 * s3rver.js — a local S3 server for spillway's S3 store tests.
 *
 *   node tests/s3/s3rver.js --dir DIR [--port N] [--access-key ID]
 *        [--secret-key SECRET] [--bucket NAME]...
 *
 * Serves @20minutes/s3rver (SigV4 checked) on 127.0.0.1:N (0 = any free
 * port), storing objects under DIR, with one key pair (default
 * S3RVER/S3RVER) and the given buckets created. Prints "ready PORT" on
 * stdout once it accepts requests, then runs until SIGTERM/SIGINT or, when
 * stdin is a pipe, until that pipe closes (so it never outlives the test
 * that started it). Run `npm ci` in tests/s3 first.
 */
'use strict'

const path = require('node:path')

function usage(msg) {
  process.stderr.write(`s3rver.js: ${msg}\n`)
  process.exit(2)
}

const opts = { port: 0, dir: null, accessKey: 'S3RVER', secretKey: 'S3RVER', buckets: [] }
const argv = process.argv.slice(2)
for (let i = 0; i < argv.length; i++) {
  const a = argv[i]
  const v = argv[i + 1]
  if (v === undefined) usage(`${a} needs a value`)
  switch (a) {
    case '--port':
      opts.port = Number(v)
      if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535)
        usage(`bad port ${v}`)
      break
    case '--dir':
      opts.dir = path.resolve(v)
      break
    case '--access-key':
      opts.accessKey = v
      break
    case '--secret-key':
      opts.secretKey = v
      break
    case '--bucket':
      opts.buckets.push({ name: v })
      break
    default:
      usage(`unknown option ${a}`)
  }
  i++
}
if (!opts.dir) usage('--dir is required')

let S3rver, account
try {
  S3rver = require('@20minutes/s3rver')
  account = require('@20minutes/s3rver/lib/models/account')
} catch (err) {
  usage(`cannot load @20minutes/s3rver (run "npm ci" in ${__dirname}): ${err.message}`)
}

// Replace the built-in S3RVER/S3RVER pair by the configured one.
account.DUMMY_ACCOUNT.revokeAccessKey('S3RVER')
account.DUMMY_ACCOUNT.createKeyPair(opts.accessKey, opts.secretKey)

const server = new S3rver({
  address: '127.0.0.1',
  port: opts.port,
  directory: opts.dir,
  silent: true,
  configureBuckets: opts.buckets,
})

let stopping = false
function stop() {
  if (stopping) return
  stopping = true
  server.close().then(
    () => process.exit(0),
    () => process.exit(0)
  )
  setTimeout(() => process.exit(0), 2000).unref()
}
process.on('SIGTERM', stop)
process.on('SIGINT', stop)
// A pipe on stdin is the parent's lifeline: stop when it closes.
if (require('node:fs').fstatSync(0).isFIFO()) {
  process.stdin.on('end', stop)
  process.stdin.on('error', stop)
  process.stdin.resume()
}

server.run().then(
  (addr) => process.stdout.write(`ready ${addr.port}\n`),
  (err) => {
    process.stderr.write(`s3rver.js: cannot start: ${err.message}\n`)
    process.exit(1)
  }
)
