#!/usr/bin/env node
// Writes src/models.d.ts from the repository's openapi.json: one declaration per schema of
// `components.schemas`, with the schema's descriptions as doc comments.
//
//   node scripts/gen-models.js           write src/models.d.ts
//   node scripts/gen-models.js --check   exit 1 if src/models.d.ts differs from what it would write
//
// test/models.test.js holds the declarations to the document on its own (it reads the .d.ts with
// the TypeScript parser, not with this script), so a change of openapi.json fails the suite
// until this script is run again.

import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const OPENAPI = join(here, '..', '..', '..', 'openapi.json');
export const MODELS = join(here, '..', 'src', 'models.d.ts');

/**
 * Properties the document leaves untyped (`{}`), typed here from docs/api.md. Declared by hand in
 * src/results.d.ts. The key is `Schema.property`.
 */
const UNTYPED = {
  'TaskView.results': { type: 'TaskResult[]', imports: ['TaskResult'] },
  'TaskView.error': { type: 'TaskError | null', imports: ['TaskError'] },
};

const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

function refName(ref) {
  const prefix = '#/components/schemas/';
  if (!ref.startsWith(prefix)) throw new Error(`unsupported $ref ${ref}`);
  return ref.slice(prefix.length);
}

function doc(text, indent) {
  if (!text) return '';
  const lines = String(text).replaceAll('*/', '*\\/').split('\n');
  if (lines.length === 1) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => `${indent} *${l ? ` ${l}` : ''}`).join('\n')}\n${indent} */\n`;
}

function union(parts) {
  const seen = [];
  for (const p of parts) if (!seen.includes(p)) seen.push(p);
  return seen.join(' | ');
}

function arrayOf(t) {
  return /[|&]/.test(t) ? `(${t})[]` : `${t}[]`;
}

/** The TypeScript type of a schema that is not a top-level declaration. */
function tsType(schema, indent) {
  if (schema === true || schema === undefined || Object.keys(stripDocs(schema)).length === 0) {
    return 'unknown';
  }
  if (schema.$ref) return refName(schema.$ref);
  if (schema.oneOf || schema.anyOf) {
    return union((schema.oneOf ?? schema.anyOf).map((s) => tsType(s, indent)));
  }
  if (schema.allOf) {
    if (schema.allOf.length === 1) return tsType(schema.allOf[0], indent);
    return schema.allOf.map((s) => tsType(s, indent)).join(' & ');
  }
  if (schema.enum) return union(schema.enum.map((v) => JSON.stringify(v)));
  if (Array.isArray(schema.type)) {
    return union(schema.type.map((t) => tsType({ ...schema, type: t }, indent)));
  }
  switch (schema.type) {
    case 'string':
      return 'string';
    case 'integer':
    case 'number':
      return 'number';
    case 'boolean':
      return 'boolean';
    case 'null':
      return 'null';
    case 'array':
      return arrayOf(schema.items ? tsType(schema.items, indent) : 'unknown');
    case 'object': {
      if (schema.properties) return objectLiteral(schema, indent);
      const extra = schema.additionalProperties;
      if (extra && typeof extra === 'object') return `Record<string, ${tsType(extra, indent)}>`;
      return 'Record<string, unknown>';
    }
    default:
      throw new Error(`unsupported schema type ${JSON.stringify(schema.type)}`);
  }
}

function stripDocs(schema) {
  const { description, format, minimum, maximum, pattern, maxLength, minLength, example, examples, default: _d, ...rest } = schema;
  return rest;
}

function members(schema, owner, indent, imports) {
  const required = new Set(schema.required ?? []);
  let out = '';
  for (const [name, prop] of Object.entries(schema.properties ?? {})) {
    const override = UNTYPED[`${owner}.${name}`];
    let type;
    if (override) {
      type = override.type;
      for (const i of override.imports) imports.add(i);
    } else {
      type = tsType(prop, indent);
    }
    const description = prop.description ?? prop.oneOf?.find((s) => s.description)?.description;
    const key = IDENT.test(name) ? name : JSON.stringify(name);
    out += doc(description, indent);
    out += `${indent}${key}${required.has(name) ? '' : '?'}: ${type};\n`;
  }
  return out;
}

function objectLiteral(schema, indent) {
  const inner = `${indent}  `;
  return `{\n${members(schema, '', inner, new Set())}${indent}}`;
}

/** One top-level declaration. */
function declaration(name, schema, imports) {
  let out = doc(schema.description, '');
  if (schema.allOf) {
    const bases = schema.allOf.filter((s) => s.$ref).map((s) => refName(s.$ref));
    const inline = schema.allOf.filter((s) => !s.$ref);
    if (inline.length > 1) throw new Error(`${name}: more than one inline allOf member`);
    const body = inline.length ? members(inline[0], name, '  ', imports) : '';
    out += `export interface ${name} extends ${bases.join(', ')} {\n${body}}\n`;
    return out;
  }
  if (schema.type === 'object' && schema.properties) {
    out += `export interface ${name} {\n${members(schema, name, '  ', imports)}}\n`;
    return out;
  }
  out += `export type ${name} = ${tsType(schema, '')};\n`;
  return out;
}

/** The text of src/models.d.ts for the document `openapi`. */
export function generate(openapi) {
  const schemas = openapi.components?.schemas ?? {};
  const imports = new Set();
  const decls = Object.entries(schemas)
    .map(([name, schema]) => declaration(name, schema, imports))
    .join('\n');
  const header =
    `// Generated from openapi.json (${openapi.info?.title} ${openapi.info?.version}) by ` +
    'scripts/gen-models.js: do not edit.\n' +
    '// Run `npm run gen:models` after the document changes; test/models.test.js compares the two.\n\n';
  const importLine = imports.size
    ? `import type { ${[...imports].sort().join(', ')} } from './results.js';\n\n`
    : '';
  return header + importLine + decls;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const text = generate(JSON.parse(readFileSync(OPENAPI, 'utf8')));
  if (process.argv.includes('--check')) {
    const current = readFileSync(MODELS, 'utf8');
    if (current !== text) {
      console.error(`${MODELS} is not what openapi.json gives; run: npm run gen:models`);
      process.exit(1);
    }
  } else {
    writeFileSync(MODELS, text);
    console.log(`wrote ${MODELS}`);
  }
}
