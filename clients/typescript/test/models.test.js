// The shipped model types (src/models.d.ts) against the API contract (openapi.json at the
// repository root): every schema has a declaration, with the same properties, the same
// optionality and the same types. The declarations are read with the TypeScript parser, not
// with the script that wrote them, so a change of the document fails here until
// `npm run gen:models` is run (and a hand edit of the .d.ts that drifts from the document too).

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { generate, MODELS, OPENAPI } from '../scripts/gen-models.js';

const here = dirname(fileURLToPath(import.meta.url));

async function typescript() {
  try {
    return (await import('typescript')).default;
  } catch (e) {
    throw new Error(
      `this test reads the declarations with the TypeScript parser, a dev dependency: run \`npm install\` in ${join(here, '..')} ` +
        `(run-tests.sh does) (${e.message})`,
    );
  }
}

// --- the document's side ---------------------------------------------------------------------

const ANY = '*';

function refName(ref) {
  return ref.replace('#/components/schemas/', '');
}

/** A schema as a sorted list of type atoms (`string`, `null`, `ref:X`, `array<…>`, `lit:"x"`, …). */
function schemaAtoms(schema) {
  if (schema === undefined || schema === true) return [ANY];
  const { description, format, minimum, maximum, pattern, maxLength, minLength, propertyNames, ...rest } = schema;
  if (Object.keys(rest).length === 0) return [ANY];
  if (schema.$ref) return [`ref:${refName(schema.$ref)}`];
  if (schema.oneOf || schema.anyOf) return uniq((schema.oneOf ?? schema.anyOf).flatMap(schemaAtoms));
  if (schema.allOf && schema.allOf.length === 1) return schemaAtoms(schema.allOf[0]);
  if (schema.enum) return uniq(schema.enum.map((v) => `lit:${JSON.stringify(v)}`));
  const types = Array.isArray(schema.type) ? schema.type : [schema.type];
  return uniq(
    types.flatMap((t) => {
      switch (t) {
        case 'string':
          return ['string'];
        case 'integer':
        case 'number':
          return ['number'];
        case 'boolean':
          return ['boolean'];
        case 'null':
          return ['null'];
        case 'array':
          return [`array<${schemaAtoms(schema.items).join('|')}>`];
        case 'object':
          if (schema.properties) return [`object{${Object.keys(schema.properties).sort().join(',')}}`];
          if (schema.additionalProperties && typeof schema.additionalProperties === 'object') {
            return [`record<${schemaAtoms(schema.additionalProperties).join('|')}>`];
          }
          return ['record<*>'];
        default:
          throw new Error(`unexpected schema type ${t}`);
      }
    }),
  );
}

function uniq(list) {
  return [...new Set(list)].sort();
}

/** What the document says a schema declares: an interface (bases + properties) or an alias. */
function documentShape(name, schema) {
  if (schema.allOf) {
    const inline = schema.allOf.filter((s) => !s.$ref);
    const props = Object.assign({}, ...inline.map((s) => s.properties ?? {}));
    const required = new Set(inline.flatMap((s) => s.required ?? []));
    return {
      kind: 'interface',
      bases: schema.allOf.filter((s) => s.$ref).map((s) => refName(s.$ref)).sort(),
      props: Object.fromEntries(
        Object.entries(props).map(([k, v]) => [k, { optional: !required.has(k), atoms: schemaAtoms(v) }]),
      ),
    };
  }
  if (schema.type === 'object' && schema.properties) {
    const required = new Set(schema.required ?? []);
    return {
      kind: 'interface',
      bases: [],
      props: Object.fromEntries(
        Object.entries(schema.properties).map(([k, v]) => [k, { optional: !required.has(k), atoms: schemaAtoms(v) }]),
      ),
    };
  }
  return { kind: 'alias', atoms: schemaAtoms(schema) };
}

// --- the declarations' side ------------------------------------------------------------------

function typeAtoms(ts, node) {
  const K = ts.SyntaxKind;
  switch (node.kind) {
    case K.UnionType:
      return uniq(node.types.flatMap((t) => typeAtoms(ts, t)));
    case K.ParenthesizedType:
      return typeAtoms(ts, node.type);
    case K.StringKeyword:
      return ['string'];
    case K.NumberKeyword:
      return ['number'];
    case K.BooleanKeyword:
      return ['boolean'];
    case K.UnknownKeyword:
    case K.AnyKeyword:
      return [ANY];
    case K.LiteralType:
      if (node.literal.kind === K.NullKeyword) return ['null'];
      if (node.literal.kind === K.StringLiteral) return [`lit:${JSON.stringify(node.literal.text)}`];
      throw new Error(`unexpected literal ${node.getText()}`);
    case K.ArrayType:
      return [`array<${typeAtoms(ts, node.elementType).join('|')}>`];
    case K.TypeLiteral:
      return [`object{${node.members.map((m) => m.name.getText()).sort().join(',')}}`];
    case K.TypeReference: {
      const name = node.typeName.getText();
      if (name === 'Record') return [`record<${typeAtoms(ts, node.typeArguments[1]).join('|')}>`];
      return [`ref:${name}`];
    }
    default:
      throw new Error(`unexpected type ${K[node.kind]} (${node.getText()})`);
  }
}

/** Every top-level declaration of a .d.ts, in the shapes of `documentShape`. */
function declarations(ts, text, file) {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.ES2022, true);
  const out = {};
  for (const stmt of source.statements) {
    if (ts.isInterfaceDeclaration(stmt)) {
      const bases = (stmt.heritageClauses ?? []).flatMap((h) => h.types.map((t) => t.expression.getText())).sort();
      const props = {};
      for (const m of stmt.members) {
        if (!ts.isPropertySignature(m)) throw new Error(`${stmt.name.text}: unexpected member ${m.getText()}`);
        const name = m.name.text ?? m.name.getText();
        props[name] = { optional: Boolean(m.questionToken), atoms: typeAtoms(ts, m.type), node: m.type.getText() };
      }
      out[stmt.name.text] = { kind: 'interface', bases, props };
    } else if (ts.isTypeAliasDeclaration(stmt)) {
      out[stmt.name.text] = { kind: 'alias', atoms: typeAtoms(ts, stmt.type) };
    }
  }
  return out;
}

/** Whether declared atoms match the document's, where the document's `*` (untyped) matches anything. */
function matches(want, have) {
  if (!want.includes(ANY)) return want === have;
  const pattern = want.replace(/[.*+?^${}()|[\]\\]/g, (c) => (c === '*' ? '.*' : `\\${c}`));
  return new RegExp(`^${pattern}$`).test(have);
}

/** Every disagreement between the document and the declarations, as sentences. */
function differences(openapi, decls) {
  const problems = [];
  const schemas = openapi.components.schemas;
  for (const [name, schema] of Object.entries(schemas)) {
    const want = documentShape(name, schema);
    const have = decls[name];
    if (!have) {
      problems.push(`schema ${name} has no declaration`);
      continue;
    }
    if (want.kind !== have.kind) {
      problems.push(`${name}: the document makes it an ${want.kind}, the declaration an ${have.kind}`);
      continue;
    }
    if (want.kind === 'alias') {
      if (want.atoms.join('|') !== have.atoms.join('|')) {
        problems.push(`${name}: the document says ${want.atoms.join(' | ')}, the declaration ${have.atoms.join(' | ')}`);
      }
      continue;
    }
    if (want.bases.join(',') !== have.bases.join(',')) {
      problems.push(`${name}: extends ${have.bases.join(', ') || 'nothing'} where the document has allOf ${want.bases.join(', ') || 'nothing'}`);
    }
    for (const [prop, w] of Object.entries(want.props)) {
      const h = have.props[prop];
      if (!h) {
        problems.push(`${name}.${prop} is in the document but not declared`);
        continue;
      }
      if (w.optional !== h.optional) {
        problems.push(`${name}.${prop} is ${w.optional ? 'optional' : 'required'} in the document but ${h.optional ? 'optional' : 'required'} in the declaration`);
      }
      // An untyped property (`{}` in the document, or arrays of it) may be typed by hand
      // (src/results.d.ts).
      if (!matches(w.atoms.join('|'), h.atoms.join('|'))) {
        problems.push(`${name}.${prop}: the document says ${w.atoms.join(' | ')}, the declaration ${h.node}`);
      }
    }
    for (const prop of Object.keys(have.props)) {
      if (!(prop in want.props)) problems.push(`${name}.${prop} is declared but not in the document`);
    }
  }
  for (const [name] of Object.entries(decls)) {
    if (!(name in schemas)) problems.push(`${name} is declared in models.d.ts but is no schema of the document`);
  }
  for (const [name, d] of Object.entries(decls)) {
    const refs = d.kind === 'alias' ? d.atoms : Object.values(d.props).flatMap((p) => p.atoms);
    for (const atom of refs.join(' ').match(/ref:[A-Za-z]+/g) ?? []) {
      const target = atom.slice(4);
      if (!(target in schemas) && !['TaskResult', 'TaskError'].includes(target)) {
        problems.push(`${name} refers to ${target}, which the document does not define`);
      }
    }
  }
  return problems;
}

const openapi = JSON.parse(readFileSync(OPENAPI, 'utf8'));
const modelsText = readFileSync(MODELS, 'utf8');

test('every schema of openapi.json is declared in models.d.ts, field by field', async () => {
  const ts = await typescript();
  const problems = differences(openapi, declarations(ts, modelsText, MODELS));
  assert.deepEqual(problems, [], `models.d.ts and openapi.json disagree; run \`npm run gen:models\`:\n${problems.join('\n')}`);
  assert.ok(Object.keys(openapi.components.schemas).length > 50, 'the document has its schemas');
});

test('the comparison notices a document change (so the test above can fail)', async () => {
  const ts = await typescript();
  const decls = declarations(ts, modelsText, MODELS);
  const changed = structuredClone(openapi);
  const s = changed.components.schemas;
  s.TaskSummary.properties.shot_count = { type: 'integer' };
  s.TaskSummary.required.push('shot_count');
  s.Problem.required = s.Problem.required.filter((f) => f !== 'detail');
  s.Me.properties.admin = { type: 'string' };
  s.TaskStatus.enum.push('paused');
  delete s.Closure;
  s.Brand = { type: 'object', properties: { x: { type: 'string' } } };
  assert.deepEqual(differences(changed, decls).sort(), [
    'TaskSummary.shot_count is in the document but not declared',
    'Problem.detail is optional in the document but required in the declaration',
    'Me.admin: the document says string, the declaration boolean',
    'TaskStatus: the document says lit:"cancelled" | lit:"completed" | lit:"failed" | lit:"paused" | lit:"pending" | lit:"running", the declaration lit:"cancelled" | lit:"completed" | lit:"failed" | lit:"pending" | lit:"running"',
    'schema Brand has no declaration',
    'Closure is declared in models.d.ts but is no schema of the document',
    'AccountView refers to Closure, which the document does not define',
    'PoolView refers to Closure, which the document does not define',
  ].sort());
});

test('models.d.ts is what scripts/gen-models.js writes from openapi.json', () => {
  assert.ok(generate(openapi) === modelsText, 'src/models.d.ts is stale or edited by hand; run `npm run gen:models`');
});
