"use strict";
// signpost's proof of work, run in a Web Worker: find the smallest n such that the hex SHA-256
// of challenge + decimal(n) starts with `difficulty` zeros. Web Crypto where it exists (secure
// contexts); this file's own SHA-256 elsewhere (plain-HTTP zones have no crypto.subtle).
// Messages out: {tried: count} now and then, {nonce: n} once.
var K = [
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
];
var W = new Int32Array(64);

// SHA-256 (FIPS 180-4) of a Uint8Array, as a Uint8Array of 32 bytes.
function sha256(msg) {
  var len = msg.length, total = ((len + 72) >> 6) << 6, i, j;
  var buf = new Uint8Array(total);
  buf.set(msg);
  buf[len] = 0x80;
  var hi = Math.floor(len / 0x20000000), lo = (len << 3) >>> 0;
  for (i = 0; i < 4; i++) {
    buf[total - 8 + i] = (hi >>> (24 - 8 * i)) & 255;
    buf[total - 4 + i] = (lo >>> (24 - 8 * i)) & 255;
  }
  var h0 = 0x6a09e667 | 0, h1 = 0xbb67ae85 | 0, h2 = 0x3c6ef372 | 0, h3 = 0xa54ff53a | 0;
  var h4 = 0x510e527f | 0, h5 = 0x9b05688c | 0, h6 = 0x1f83d9ab | 0, h7 = 0x5be0cd19 | 0;
  for (var off = 0; off < total; off += 64) {
    for (i = 0; i < 16; i++) {
      j = off + 4 * i;
      W[i] = (buf[j] << 24) | (buf[j + 1] << 16) | (buf[j + 2] << 8) | buf[j + 3];
    }
    for (i = 16; i < 64; i++) {
      var x = W[i - 15], y = W[i - 2];
      var s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      var s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
    var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7;
    for (i = 0; i < 64; i++) {
      var S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      var t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
      var S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      var t2 = (S0 + ((a & b) ^ (a & c) ^ (b & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
    }
    h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
  }
  var out = new Uint8Array(32), hs = [h0, h1, h2, h3, h4, h5, h6, h7];
  for (i = 0; i < 8; i++) {
    for (j = 0; j < 4; j++) out[4 * i + j] = (hs[i] >>> (24 - 8 * j)) & 255;
  }
  return out;
}

// The challenge and the decimals are ASCII.
function ascii(text) {
  var out = new Uint8Array(text.length);
  for (var i = 0; i < text.length; i++) out[i] = text.charCodeAt(i) & 255;
  return out;
}

function meets(hash, difficulty) {
  for (var i = 0; i < difficulty; i++) {
    var nibble = i & 1 ? hash[i >> 1] & 15 : hash[i >> 1] >> 4;
    if (nibble !== 0) return false;
  }
  return true;
}

function solveWithOwnHash(challenge, difficulty) {
  for (var n = 0; ; n++) {
    if (meets(sha256(ascii(challenge + n)), difficulty)) return n;
    if ((n & 4095) === 4095) self.postMessage({ tried: n + 1 });
  }
}

// Web Crypto answers asynchronously: ask for a batch at a time, check it in order.
async function solveWithWebCrypto(subtle, challenge, difficulty) {
  var BATCH = 256;
  for (var base = 0; ; base += BATCH) {
    var jobs = new Array(BATCH);
    for (var i = 0; i < BATCH; i++) jobs[i] = subtle.digest("SHA-256", ascii(challenge + (base + i)));
    var hashes = await Promise.all(jobs);
    for (i = 0; i < BATCH; i++) {
      if (meets(new Uint8Array(hashes[i]), difficulty)) return base + i;
    }
    if ((base + BATCH) % 4096 === 0) self.postMessage({ tried: base + BATCH });
  }
}

self.onmessage = function (event) {
  var challenge = String(event.data.challenge), difficulty = event.data.difficulty | 0;
  var subtle = self.crypto && self.crypto.subtle;
  var found = subtle
    ? solveWithWebCrypto(subtle, challenge, difficulty).catch(function () {
        return solveWithOwnHash(challenge, difficulty);
      })
    : Promise.resolve(solveWithOwnHash(challenge, difficulty));
  found.then(function (n) {
    self.postMessage({ nonce: n });
  });
};
