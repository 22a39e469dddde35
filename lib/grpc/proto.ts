// Loads proto/strata.proto at run time with the same options the typed stubs were generated with.
import { join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { ProtoGrpcType } from '../../proto/gen/strata.js';
import { packageRoot } from '../paths.js';

export type { ProtoGrpcType };

let cached: ProtoGrpcType | undefined;

export function loadStrataProto(): ProtoGrpcType {
  if (cached) return cached;
  const definition = protoLoader.loadSync(join(packageRoot, 'proto/strata.proto'), {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  cached = grpc.loadPackageDefinition(definition) as unknown as ProtoGrpcType;
  return cached;
}
