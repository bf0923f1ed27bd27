// The job's certificate authority, the ranks' keys and requests, and the
// identity a certificate carries, checked with OpenSSL's own verification.
#include "proto/rank_certificates.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <catch2/catch.hpp>

namespace dslaunch::proto {
namespace {

X509* read_certificate(const std::string& pem) {
  BIO* in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* certificate = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  return certificate;
}

// Whether `leaf` verifies against `root` for TLS client authentication.
bool verifies_as_client(const std::string& leaf, const std::string& root) {
  X509* root_certificate = read_certificate(root);
  X509* leaf_certificate = read_certificate(leaf);
  X509_STORE* store = X509_STORE_new();
  X509_STORE_add_cert(store, root_certificate);
  X509_STORE_CTX* context = X509_STORE_CTX_new();
  X509_STORE_CTX_init(context, store, leaf_certificate, nullptr);
  X509_STORE_CTX_set_purpose(context, X509_PURPOSE_SSL_CLIENT);
  const bool ok = X509_verify_cert(context) == 1;
  X509_STORE_CTX_free(context);
  X509_STORE_free(store);
  X509_free(leaf_certificate);
  X509_free(root_certificate);
  return ok;
}

TEST_CASE(
    "the job's CA issues a rank certificate that verifies for client authentication and "
    "names the rank") {
  auto authority = JobCertificateAuthority::create("demo-20260101-000000-beef");
  REQUIRE(authority.ok());
  auto made = make_key_and_request("dslaunch rank 3");
  REQUIRE(made.ok());
  CHECK(made->private_key_pem.rfind("-----BEGIN PRIVATE KEY-----", 0) == 0);
  CHECK(made->request_pem.rfind("-----BEGIN CERTIFICATE REQUEST-----", 0) == 0);

  const RankIdentity identity{"demo-20260101-000000-beef", 2, 3};
  auto issued = (*authority)->issue(made->request_pem, identity);
  REQUIRE(issued.ok());
  CHECK(verifies_as_client(*issued, (*authority)->certificate_pem()));
  CHECK(identity_in_certificate(*issued) == identity);
  CHECK(identity_uri(identity) == "dslaunch://job/demo-20260101-000000-beef/attempt/2/rank/3");

  // Another job's CA does not vouch for it.
  auto other = JobCertificateAuthority::create("other-job");
  REQUIRE(other.ok());
  CHECK_FALSE(verifies_as_client(*issued, (*other)->certificate_pem()));
  // The CA's own certificate names no rank.
  CHECK_FALSE(identity_in_certificate((*authority)->certificate_pem()));
}

TEST_CASE("a request that is not one, or that its key did not sign, is refused") {
  auto authority = JobCertificateAuthority::create("job");
  REQUIRE(authority.ok());
  const RankIdentity identity{"job", 0, 0};
  for (const std::string& bad : {std::string(""), std::string("garbage"),
                                 std::string("-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n"
                                             "-----END CERTIFICATE REQUEST-----\n")}) {
    const auto issued = (*authority)->issue(bad, identity);
    CHECK(issued.status().code() == core::StatusCode::kInvalidArgument);
  }
  // A valid request with one byte of its signature changed.
  auto made = make_key_and_request("rank");
  REQUIRE(made.ok());
  std::string tampered = made->request_pem;
  const size_t end = tampered.find("-----END");
  tampered[end - 10] = tampered[end - 10] == 'A' ? 'B' : 'A';
  CHECK_FALSE((*authority)->issue(tampered, identity).ok());
  // Another job's identity is not this CA's to give.
  CHECK((*authority)->issue(made->request_pem, {"other", 0, 0}).status().code() ==
        core::StatusCode::kInvalidArgument);
}

TEST_CASE("identities are read only from well-formed dslaunch URIs") {
  CHECK_FALSE(identity_in_certificate("not a certificate"));
  auto authority = JobCertificateAuthority::create("a/attempt/9/rank/9-ish");
  REQUIRE(authority.ok());
  auto made = make_key_and_request("rank");
  REQUIRE(made.ok());
  // A job id that itself looks like a path still round-trips: the last
  // /attempt/ and /rank/ are the identity's.
  const RankIdentity identity{"a/attempt/9/rank/9-ish", 4, 7};
  auto issued = (*authority)->issue(made->request_pem, identity);
  REQUIRE(issued.ok());
  CHECK(identity_in_certificate(*issued) == identity);
}

}  // namespace
}  // namespace dslaunch::proto
