// The subset of cuDNN's C API that cudnn_legacy.cu, cudnn_graph.cu and cudnn_sdpa.cu call: the legacy convolution
// calls (cudnn_ops.h, cudnn_cnn.h) and the backend ("graph") descriptors (cudnn_graph.h) of cuDNN 9, declared here
// so that nothing needs cudnn.h to build: the library (libcudnn.so.9) is opened at run time, and the plug-in loads
// and runs without it. Types are opaque handles and plain ints; values and signatures as the cuDNN 9
// headers define them (checked against cuDNN 9.19's headers; unchanged since cuDNN 8 for these entry points).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_runtime.h>

namespace rbee::gpu::cudnn {

using Handle = struct cudnnContext*;                        // cudnnHandle_t
using TensorDesc = struct cudnnTensorStruct*;               // cudnnTensorDescriptor_t
using FilterDesc = struct cudnnFilterStruct*;               // cudnnFilterDescriptor_t
using ConvDesc = struct cudnnConvolutionStruct*;            // cudnnConvolutionDescriptor_t
using ActivationDesc = struct cudnnActivationStruct*;       // cudnnActivationDescriptor_t
using Status = int;                                         // cudnnStatus_t

constexpr Status kSuccess = 0;              // CUDNN_STATUS_SUCCESS
constexpr int kDataFloat = 0;               // CUDNN_DATA_FLOAT (cudnnDataType_t)
constexpr int kDataHalf = 2;                // CUDNN_DATA_HALF
constexpr int kDataBfloat16 = 9;            // CUDNN_DATA_BFLOAT16
constexpr int kTensorNchw = 0;              // CUDNN_TENSOR_NCHW (cudnnTensorFormat_t)
constexpr int kTensorNhwc = 1;              // CUDNN_TENSOR_NHWC
constexpr int kCrossCorrelation = 1;        // CUDNN_CROSS_CORRELATION (cudnnConvolutionMode_t)
constexpr int kTensorOpMath = 1;            // CUDNN_TENSOR_OP_MATH (cudnnMathType_t)
constexpr int kActivationIdentity = 5;      // CUDNN_ACTIVATION_IDENTITY (cudnnActivationMode_t)
constexpr int kNotPropagateNan = 0;         // CUDNN_NOT_PROPAGATE_NAN (cudnnNanPropagation_t)
constexpr int kFwdAlgoImplicitPrecompGemm = 1;  // CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM

// Backend API: descriptors are opaque pointers made by type, filled attribute by attribute, then finalized.
using BackendDesc = void*;                  // cudnnBackendDescriptor_t
// cudnnBackendDescriptorType_t
constexpr int kPointwiseDescriptor = 0;     // CUDNN_BACKEND_POINTWISE_DESCRIPTOR
constexpr int kConvolutionDescriptor = 1;   // CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR
constexpr int kEngineCfgDescriptor = 3;     // CUDNN_BACKEND_ENGINECFG_DESCRIPTOR
constexpr int kEngineHeurDescriptor = 4;    // CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR
constexpr int kExecutionPlanDescriptor = 5; // CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR
constexpr int kOpConvForwardDescriptor = 10;  // CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
constexpr int kOpPointwiseDescriptor = 13;  // CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR
constexpr int kOpGraphDescriptor = 15;      // CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR
constexpr int kVariantPackDescriptor = 16;  // CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR
constexpr int kTensorDescriptor = 17;       // CUDNN_BACKEND_TENSOR_DESCRIPTOR
constexpr int kMatmulDescriptor = 18;       // CUDNN_BACKEND_MATMUL_DESCRIPTOR
constexpr int kOpMatmulDescriptor = 19;     // CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR
constexpr int kReductionDescriptor = 21;    // CUDNN_BACKEND_REDUCTION_DESCRIPTOR
constexpr int kOpReductionDescriptor = 22;  // CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR
// cudnnBackendAttributeType_t
constexpr int kTypeHandle = 0;              // CUDNN_TYPE_HANDLE
constexpr int kTypeDataType = 1;            // CUDNN_TYPE_DATA_TYPE (an int-sized cudnnDataType_t)
constexpr int kTypeBoolean = 2;             // CUDNN_TYPE_BOOLEAN (a C bool)
constexpr int kTypeInt64 = 3;               // CUDNN_TYPE_INT64
constexpr int kTypeFloat = 4;               // CUDNN_TYPE_FLOAT
constexpr int kTypeVoidPtr = 6;             // CUDNN_TYPE_VOID_PTR
constexpr int kTypeConvolutionMode = 7;     // CUDNN_TYPE_CONVOLUTION_MODE
constexpr int kTypeHeurMode = 8;            // CUDNN_TYPE_HEUR_MODE
constexpr int kTypePointwiseMode = 14;      // CUDNN_TYPE_POINTWISE_MODE
constexpr int kTypeBackendDescriptor = 15;  // CUDNN_TYPE_BACKEND_DESCRIPTOR
constexpr int kTypeReductionOperator = 18;  // CUDNN_TYPE_REDUCTION_OPERATOR_TYPE
// cudnnBackendAttributeName_t
constexpr int kAttrPointwiseMode = 0;                 // CUDNN_ATTR_POINTWISE_MODE
constexpr int kAttrPointwiseMathPrec = 1;             // CUDNN_ATTR_POINTWISE_MATH_PREC
constexpr int kAttrConvCompType = 100;                // CUDNN_ATTR_CONVOLUTION_COMP_TYPE
constexpr int kAttrConvMode = 101;                    // CUDNN_ATTR_CONVOLUTION_CONV_MODE
constexpr int kAttrConvDilations = 102;               // CUDNN_ATTR_CONVOLUTION_DILATIONS
constexpr int kAttrConvFilterStrides = 103;           // CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES
constexpr int kAttrConvPostPaddings = 104;            // CUDNN_ATTR_CONVOLUTION_POST_PADDINGS
constexpr int kAttrConvPrePaddings = 105;             // CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS
constexpr int kAttrConvSpatialDims = 106;             // CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS
constexpr int kAttrEngineHeurMode = 200;              // CUDNN_ATTR_ENGINEHEUR_MODE
constexpr int kAttrEngineHeurOpGraph = 201;           // CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH
constexpr int kAttrEngineHeurResults = 202;           // CUDNN_ATTR_ENGINEHEUR_RESULTS
constexpr int kAttrPlanHandle = 400;                  // CUDNN_ATTR_EXECUTION_PLAN_HANDLE
constexpr int kAttrPlanEngineConfig = 401;            // CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG
constexpr int kAttrPlanWorkspaceSize = 402;           // CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE
constexpr int kAttrConvFwdAlpha = 700;                // CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA
constexpr int kAttrConvFwdBeta = 701;                 // CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA
constexpr int kAttrConvFwdConvDesc = 702;             // CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC
constexpr int kAttrConvFwdW = 703;                    // CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W
constexpr int kAttrConvFwdX = 704;                    // CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X
constexpr int kAttrConvFwdY = 705;                    // CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y
constexpr int kAttrOpPointwisePwDesc = 750;           // CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR
constexpr int kAttrOpPointwiseX = 751;                // CUDNN_ATTR_OPERATION_POINTWISE_XDESC
constexpr int kAttrOpPointwiseB = 752;                // CUDNN_ATTR_OPERATION_POINTWISE_BDESC
constexpr int kAttrOpPointwiseY = 753;                // CUDNN_ATTR_OPERATION_POINTWISE_YDESC
constexpr int kAttrOpGraphHandle = 800;               // CUDNN_ATTR_OPERATIONGRAPH_HANDLE
constexpr int kAttrOpGraphOps = 801;                  // CUDNN_ATTR_OPERATIONGRAPH_OPS
constexpr int kAttrTensorByteAlignment = 900;         // CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT
constexpr int kAttrTensorDataType = 901;              // CUDNN_ATTR_TENSOR_DATA_TYPE
constexpr int kAttrTensorDimensions = 902;            // CUDNN_ATTR_TENSOR_DIMENSIONS
constexpr int kAttrTensorStrides = 903;               // CUDNN_ATTR_TENSOR_STRIDES
constexpr int kAttrTensorUniqueId = 906;              // CUDNN_ATTR_TENSOR_UNIQUE_ID
constexpr int kAttrTensorIsVirtual = 907;             // CUDNN_ATTR_TENSOR_IS_VIRTUAL
constexpr int kAttrTensorIsByValue = 908;             // CUDNN_ATTR_TENSOR_IS_BY_VALUE (a host scalar in the pack)
constexpr int kAttrVariantPackUniqueIds = 1000;       // CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS
constexpr int kAttrVariantPackDataPointers = 1001;    // CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS
constexpr int kAttrVariantPackWorkspace = 1003;       // CUDNN_ATTR_VARIANT_PACK_WORKSPACE
constexpr int kAttrMatmulCompType = 1500;             // CUDNN_ATTR_MATMUL_COMP_TYPE
constexpr int kAttrOpMatmulA = 1520;                  // CUDNN_ATTR_OPERATION_MATMUL_ADESC
constexpr int kAttrOpMatmulB = 1521;                  // CUDNN_ATTR_OPERATION_MATMUL_BDESC
constexpr int kAttrOpMatmulC = 1522;                  // CUDNN_ATTR_OPERATION_MATMUL_CDESC
constexpr int kAttrOpMatmulDesc = 1523;               // CUDNN_ATTR_OPERATION_MATMUL_DESC
constexpr int kAttrReductionOperator = 1600;          // CUDNN_ATTR_REDUCTION_OPERATOR
constexpr int kAttrReductionCompType = 1601;          // CUDNN_ATTR_REDUCTION_COMP_TYPE
constexpr int kAttrOpReductionX = 1610;               // CUDNN_ATTR_OPERATION_REDUCTION_XDESC
constexpr int kAttrOpReductionY = 1611;               // CUDNN_ATTR_OPERATION_REDUCTION_YDESC
constexpr int kAttrOpReductionDesc = 1612;            // CUDNN_ATTR_OPERATION_REDUCTION_DESC
constexpr int kPointwiseAdd = 0;                      // CUDNN_POINTWISE_ADD (cudnnPointwiseMode_t)
constexpr int kPointwiseSwishFwd = 106;               // CUDNN_POINTWISE_SWISH_FWD: x / (1 + exp(-x)) (beta 1)
constexpr int kPointwiseMul = 1;                      // CUDNN_POINTWISE_MUL
constexpr int kPointwiseDiv = 6;                      // CUDNN_POINTWISE_DIV
constexpr int kPointwiseSub = 9;                      // CUDNN_POINTWISE_SUB
constexpr int kPointwiseExp = 13;                     // CUDNN_POINTWISE_EXP
constexpr int kPointwiseLog = 15;                     // CUDNN_POINTWISE_LOG
constexpr int kReduceAdd = 0;                         // CUDNN_REDUCE_TENSOR_ADD (cudnnReduceTensorOp_t)
constexpr int kReduceMax = 3;                         // CUDNN_REDUCE_TENSOR_MAX
constexpr int kHeurModeA = 3;                         // CUDNN_HEUR_MODE_A (cudnnBackendHeurMode_t)
constexpr int kHeurModeFallback = 2;                  // CUDNN_HEUR_MODE_FALLBACK

using GetVersionFn = size_t (*)();
using GetErrorStringFn = const char* (*)(Status);
using CreateFn = Status (*)(Handle*);
using DestroyFn = Status (*)(Handle);
using SetStreamFn = Status (*)(Handle, cudaStream_t);
using CreateTensorDescFn = Status (*)(TensorDesc*);
// (desc, format, data type, n, c, h, w): dims in NCHW order whatever the format.
using SetTensor4dDescFn = Status (*)(TensorDesc, int format, int type, int n, int c, int h, int w);
using DestroyTensorDescFn = Status (*)(TensorDesc);
using CreateFilterDescFn = Status (*)(FilterDesc*);
// (desc, data type, format, k = output channels, c = input channels, h, w): KCRS for NCHW, KRSC for NHWC.
using SetFilter4dDescFn = Status (*)(FilterDesc, int type, int format, int k, int c, int h, int w);
using DestroyFilterDescFn = Status (*)(FilterDesc);
using CreateConvDescFn = Status (*)(ConvDesc*);
// (desc, pad_h, pad_w, stride_h, stride_w, dilation_h, dilation_w, mode, compute type)
using SetConv2dDescFn = Status (*)(ConvDesc, int, int, int, int, int, int, int mode, int compute_type);
using SetConvMathTypeFn = Status (*)(ConvDesc, int math_type);
using DestroyConvDescFn = Status (*)(ConvDesc);
using CreateActivationDescFn = Status (*)(ActivationDesc*);
using SetActivationDescFn = Status (*)(ActivationDesc, int mode, int nan_opt, double coef);
using DestroyActivationDescFn = Status (*)(ActivationDesc);
using GetConvFwdWorkspaceSizeFn = Status (*)(Handle, TensorDesc x, FilterDesc w, ConvDesc conv, TensorDesc y, int algo,
                                             size_t* bytes);
// y = act(alpha1 * conv(x, w) + alpha2 * z + bias); alpha1 / alpha2 point to floats for 16-bit data.
using ConvBiasActFwdFn = Status (*)(Handle, const void* alpha1, TensorDesc x_desc, const void* x, FilterDesc w_desc,
                                    const void* w, ConvDesc conv, int algo, void* workspace, size_t workspace_bytes,
                                    const void* alpha2, TensorDesc z_desc, const void* z, TensorDesc bias_desc,
                                    const void* bias, ActivationDesc act, TensorDesc y_desc, void* y);
using BackendCreateFn = Status (*)(int type, BackendDesc* desc);
using BackendDestroyFn = Status (*)(BackendDesc desc);
using BackendFinalizeFn = Status (*)(BackendDesc desc);
// (desc, attribute name, attribute type, element count, elements)
using BackendSetAttrFn = Status (*)(BackendDesc desc, int name, int type, int64_t count, const void* elements);
// (desc, attribute name, attribute type, requested count, *count returned, elements)
using BackendGetAttrFn = Status (*)(BackendDesc desc, int name, int type, int64_t requested, int64_t* count,
                                    void* elements);
using BackendExecuteFn = Status (*)(Handle handle, BackendDesc plan, BackendDesc variant_pack);

// The library and its entry points (all resolved, or open_api returns nullptr).
struct Api {
  void* lib = nullptr;
  size_t version = 0;  // cudnnGetVersion(): major * 10000 + minor * 100 + patch for cuDNN 9
  GetErrorStringFn error_string = nullptr;
  CreateFn create = nullptr;
  DestroyFn destroy = nullptr;
  SetStreamFn set_stream = nullptr;
  CreateTensorDescFn create_tensor = nullptr;
  SetTensor4dDescFn set_tensor_4d = nullptr;
  DestroyTensorDescFn destroy_tensor = nullptr;
  CreateFilterDescFn create_filter = nullptr;
  SetFilter4dDescFn set_filter_4d = nullptr;
  DestroyFilterDescFn destroy_filter = nullptr;
  CreateConvDescFn create_conv = nullptr;
  SetConv2dDescFn set_conv_2d = nullptr;
  SetConvMathTypeFn set_conv_math = nullptr;
  DestroyConvDescFn destroy_conv = nullptr;
  CreateActivationDescFn create_activation = nullptr;
  SetActivationDescFn set_activation = nullptr;
  DestroyActivationDescFn destroy_activation = nullptr;
  GetConvFwdWorkspaceSizeFn fwd_workspace_size = nullptr;
  ConvBiasActFwdFn conv_bias_act_fwd = nullptr;
  BackendCreateFn backend_create = nullptr;
  BackendDestroyFn backend_destroy = nullptr;
  BackendFinalizeFn backend_finalize = nullptr;
  BackendSetAttrFn backend_set = nullptr;
  BackendGetAttrFn backend_get = nullptr;
  BackendExecuteFn backend_execute = nullptr;
};

// Opens libcudnn.so.9 once per process; `why` says what happened. nullptr when it is absent or lacks an entry point.
const Api* open_api(std::string* why);

}  // namespace rbee::gpu::cudnn
