// Reference execution of a TensorFlow.js graph model with TensorFlow.js itself (CPU backend, float32), for the
// zoo's converter parity tests and crop measurements. Never used by the library.
//
//   node tools/tfjs_reference.mjs MODEL.json INPUT.f32 N,H,W,C OUT_PREFIX [output node names, comma-separated]
//
// INPUT.f32 holds little-endian float32 values in NHWC order. Every requested output (default: the model's
// signature outputs) is written to OUT_PREFIX.<index>.f32, and OUT_PREFIX.json lists their names and shapes.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(path.resolve(process.env.TFJS_NODE_MODULES || '.node/node_modules') + '/');
const tf = require('@tensorflow/tfjs-core');
require('@tensorflow/tfjs-backend-cpu');
const converter = require('@tensorflow/tfjs-converter');

const [modelPath, inputPath, shapeText, outPrefix, outputList] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(modelPath, 'utf8'));
const folder = path.dirname(modelPath);
const weightSpecs = spec.weightsManifest.flatMap((g) => g.weights);
const shards = spec.weightsManifest.flatMap((g) => g.paths).map((p) => fs.readFileSync(path.join(folder, p)));
const joined = Buffer.concat(shards);
const weightData = joined.buffer.slice(joined.byteOffset, joined.byteOffset + joined.byteLength);
const handler = { load: async () => ({ modelTopology: spec.modelTopology, weightSpecs, weightData, format: spec.format,
  generatedBy: spec.generatedBy, convertedBy: spec.convertedBy, signature: spec.signature, userDefinedMetadata: spec.userDefinedMetadata }) };

await tf.setBackend('cpu');
const model = await converter.loadGraphModel(handler);
const shape = shapeText.split(',').map(Number);
const raw = fs.readFileSync(inputPath);
const values = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
const input = tf.tensor(values, shape, 'float32');
const names = outputList ? outputList.split(',') : model.outputs.map((o) => o.name);
let results = model.execute(input, names);
if (!Array.isArray(results)) results = [results];
const listing = [];
results.forEach((t, i) => {
  fs.writeFileSync(`${outPrefix}.${i}.f32`, Buffer.from(t.dataSync().buffer));
  listing.push({ name: names[i], shape: t.shape });
});
fs.writeFileSync(`${outPrefix}.json`, JSON.stringify({ backend: tf.getBackend(), tfjs: tf.version_core, outputs: listing }));
